"""The documentation site and the landing README say what the program does: the reference pages are what the
code generates now, the README's commands and example run as written, the getting-started page's commands run
in a fresh folder, and no page installs this project from the package index (it is not published there)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
#: the two set-up commands of the README's first screen; CI (.ci/run) runs the second one verbatim
INSTALL_AND_RUN = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && cd examples/support_rag && oloproof run"
)
INSTALL_AND_TEST = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest"


def fenced(text: str, lang: str = r"[a-z]*") -> list[str]:
    return [m.group(1) for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "gen" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}


def test_the_reference_pages_are_what_the_code_generates() -> None:
    gen = generator()
    assert gen.stale() == [], "run `python docs/gen/reference.py` and commit docs/reference/"
    config = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    from pytest_oloproof.config.settings import Settings
    from pytest_oloproof.errors import ExitCode

    for key in Settings.model_fields:  # every top-level key of oloproof.yaml has its row
        assert f"| `{key}` |" in config
    codes = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    assert all(f"| {c.value} | `{c.name}` |" in codes for c in ExitCode)


def test_a_stale_reference_page_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    for name in gen.PAGES:
        (tmp_path / name).write_text((DOCS / "reference" / name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    assert gen.stale() == []
    (tmp_path / "config.md").write_text("# Configuration keys\n", encoding="utf-8")
    assert gen.stale() == ["config.md"]
    assert gen.main(["--check"]) == 1


def test_the_readme_keeps_its_two_first_screen_commands_and_ci_runs_the_second() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.split("\n## ", 1)[0]
    assert fenced(first_screen, "bash") == [INSTALL_AND_RUN + "\n", INSTALL_AND_TEST + "\n"]
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().splitlines()[-1] == INSTALL_AND_TEST
    assert len(readme.splitlines()) <= 150  # a landing page; the rest lives in docs/


def test_the_readme_system_in_15_lines_runs_as_written(tmp_path: Path) -> None:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## A system in 15 lines", 1)[1]
    section = section.split("\n## ", 1)[0]
    app, config, case = fenced(section)
    assert len(app.strip().splitlines()) <= 16  # "# app.py" and 15 lines
    (tmp_path / "app.py").write_text(app, encoding="utf-8")
    (tmp_path / "oloproof.yaml").write_text(config, encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text(case, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", "run", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "│ answer_correct │ 100.0%   │ [2.5%, 100.0%] │ 1 / 1 observed · 0 missing · 0 excluded │" in proc.stdout
    assert "│ hit_rate_at_1  │ 100.0%   │ [2.5%, 100.0%] │ 1 / 1 observed · 0 missing · 0 excluded │" in proc.stdout


def test_no_page_installs_this_project_from_the_package_index() -> None:
    """`pip install pytest-oloproof` would fail (not published) and `pip install oloproof` gets another product."""
    bad = re.compile(r"pip install (?:[^\n&|;#]*\s)?['\"]?(?:pytest-oloproof|oloproof)(?:\[[^\]]*\])?['\"]?(?=\s|$)")
    found = [
        f"{page.relative_to(ROOT)}: {m.group()}" for page in pages() for block in fenced(page.read_text("utf-8"))
        for m in bad.finditer(block)
    ]  # fmt: skip
    assert found == []
    assert bad.search("      - run: pip install -e . pytest-oloproof\n")  # the recipe as it was: caught
    recipe = (DOCS / "guides" / "comparing.md").read_text(encoding="utf-8")
    assert "pip install -e . ci/wheels/pytest_oloproof-0.1.0-py3-none-any.whl" in recipe


@pytest.mark.slow
def test_the_getting_started_commands_run_in_a_fresh_folder(tmp_path: Path) -> None:
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    blocks = fenced(page, "bash")
    assert blocks[0].strip() == "oloproof init demo && cd demo && oloproof run"
    script = "set -euo pipefail\n" + "".join(blocks)
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("│ criterion") >= 3  # the demo, then the langchain and llamaindex projects
    assert (tmp_path / "demo" / "report.html").is_file()
    assert re.search(r"Run run_[0-9A-Z]{26} \(complete, \d+ cases?\) stored in", proc.stdout)
