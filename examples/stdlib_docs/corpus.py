"""Build the corpus: the docstrings of the running interpreter's standard library, chunked.

The text is the Python Software Foundation's (PSF License Agreement; see
https://docs.python.org/3/license.html), read from the modules listed below with
`inspect`. Nothing is downloaded. Building is deterministic: the same interpreter
and settings give byte-identical `corpus/stdlib-<version>.jsonl`, whose sha256 is
part of the index version, so a different corpus is never served cached retrievals.

Each public module, class, function and method of a listed module with a docstring
is one document, `doc_id` its qualified name (`json.dumps`, `pathlib.Path.glob`).
Its docstring is split at blank lines into paragraphs, and paragraphs are packed
into chunks of at most MAX_WORDS words (a longer paragraph is its own chunk, cut at
MAX_WORDS); `chunk_id` is `<doc_id>#chunk<N>`, counted from 0.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
MAX_WORDS = 80
#: modules present, and not deprecated for removal, from Python 3.10 to 3.13
MODULES = (
    "abc argparse array base64 bisect calendar collections collections.abc concurrent.futures configparser "
    "contextlib copy csv dataclasses datetime decimal difflib enum fnmatch fractions functools getpass gettext "
    "glob graphlib gzip hashlib heapq hmac html ipaddress itertools json locale logging logging.handlers math "
    "mimetypes numbers operator os os.path pathlib pickle platform pprint queue random re sched secrets shelve "
    "shlex shutil sqlite3 statistics string struct subprocess tarfile tempfile textwrap threading time timeit "
    "traceback typing unicodedata urllib.parse urllib.request uuid warnings weakref zipfile zlib zoneinfo"
).split()
SETTINGS = {"max_words": MAX_WORDS, "modules": MODULES, "format": 1}


def corpus_path() -> Path:
    v = sys.version_info
    return HERE / "corpus" / f"stdlib-{v.major}.{v.minor}.{v.micro}.jsonl"


def _doc(obj: Any) -> str | None:
    raw = getattr(obj, "__doc__", None)
    if not isinstance(raw, str) or not raw.strip():
        return None
    return inspect.cleandoc(raw)


def _members(module: Any, name: str) -> list[tuple[str, Any]]:
    """The module and its own public classes, functions and methods, sorted by qualified name."""
    out: list[tuple[str, Any]] = [(name, module)]
    public = getattr(module, "__all__", None)
    names = sorted(public if isinstance(public, (list, tuple)) else vars(module))
    for attr in names:
        if attr.startswith("_"):
            continue
        obj = getattr(module, attr, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if getattr(obj, "__module__", None) not in (name, "_" + name.split(".")[-1], name.replace(".", "._")):
            if not (public and attr in public):
                continue
        out.append((f"{name}.{attr}", obj))
        if inspect.isclass(obj):
            for meth in sorted(vars(obj)):
                if meth.startswith("_") and meth != "__init__":
                    continue
                member = vars(obj)[meth]
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isroutine(member) or isinstance(member, property):
                    out.append((f"{name}.{attr}.{meth}", member))
    return out


def chunks_of(text: str, max_words: int = MAX_WORDS) -> list[str]:
    """Pack blank-line paragraphs into chunks of at most max_words words."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    out: list[str] = []
    current: list[str] = []
    for para in paragraphs:
        words = para.split()
        if len(words) > max_words:
            if current:
                out.append(" ".join(current))
                current = []
            for i in range(0, len(words), max_words):
                out.append(" ".join(words[i : i + max_words]))
            continue
        if current and len(current) + len(words) > max_words:
            out.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        out.append(" ".join(current))
    return out


def build() -> list[dict[str, str]]:
    """Every chunk of every docstring, in a fixed order."""
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for name in MODULES:
        module = importlib.import_module(name)
        for qualname, obj in _members(module, name):
            text = _doc(obj)
            if text is None or qualname in seen:
                continue
            seen.add(qualname)
            for n, chunk in enumerate(chunks_of(text)):
                rows.append({"doc_id": qualname, "chunk_id": f"{qualname}#chunk{n}", "text": chunk})
    return rows


def write(path: Path) -> None:
    """Build the corpus into `path` (atomically: parallel first runs each write their own file)."""
    path.parent.mkdir(exist_ok=True)
    body = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in build())
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.replace(path)


def load() -> tuple[list[dict[str, str]], str]:
    """The corpus (built into corpus/ on first use) and its sha256.

    It is built in a fresh, isolated interpreter: a running program may have replaced
    standard-library objects (pytest installs its own threading.excepthook, for one),
    and the corpus must not depend on who asked for it first.
    """
    path = corpus_path()
    if not path.exists():
        subprocess.run([sys.executable, "-I", str(Path(__file__).resolve()), "--write", str(path)], check=True)
    data = path.read_bytes()
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return rows, hashlib.sha256(data).hexdigest()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(Path(sys.argv[2]))
        sys.exit(0)
    rows, digest = load()
    docs = len({r["doc_id"] for r in rows})
    print(f"{len(rows)} chunks of {docs} docstrings, sha256 {digest[:16]} -> {corpus_path()}")
