"""The self-contained HTML report: one file per page, data embedded, no request of any kind.

Pages are Jinja2 templates shipped in the package (autoescaped: every user string is text);
the case table and case details are drawn by a small inline script from the JSON block, so a
10,000-case page builds one table rather than 10,000 detail trees. A Content-Security-Policy
that allows only the page's own script (by hash) keeps the page from loading anything even
if a string slipped through.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from markupsafe import Markup

from pytest_oloproof.errors import StoreError
from pytest_oloproof.records.shapes import CaseRecord, RunRecord
from pytest_oloproof.store.files import Store, atomic_write_text

from . import model

_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: Any) -> Markup:
    """JSON safe inside <script type="application/json">: no `</script>`, no HTML comment, no line separators.

    Only JSON strings can hold these characters, and inside a string the \\u escape means the same text.
    """
    text = json.dumps(model.json_clean(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in _SCRIPT_ESCAPES.items():
        text = text.replace(ch, esc)
    return Markup(text)


@cache
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


@cache
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["page_name"] = model.page_name
    return env


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_page(view: Mapping[str, Any], *, in_folder: bool = False) -> str:
    """A whole HTML document for a view of model.py (run, diagnosis, comparison or index).

    `in_folder`: the page sits beside an index.html (`oloproof report --html DIR`) and links back to it.
    """
    script = _asset("report.js")
    env = _environment()
    template = env.get_template(f"{view['kind']}.html.j2")
    data = view.get("data")
    return str(
        template.render(
            view=view,
            css=Markup(_asset("report.css")),
            script=Markup(script),
            csp=(
                "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
                f"script-src '{_script_hash(script)}'; base-uri 'none'; form-action 'none'"
            ),
            data_json=embed_json(data) if data is not None else None,
            in_folder=in_folder and view["kind"] != "index",
        )
    )


# ------------------------------------------------------------------ what the CLI and the plugin call


def _latest_diagnosis(store: Store | None, run_id: str) -> tuple[str, dict[str, Any]] | None:
    """The gold-context diagnosis of a run whose child runs are newest (its labels go in the case table)."""
    if store is None:
        return None
    best: tuple[str, str, dict[str, Any]] | None = None
    for doc_id in store.docs("diagnosis"):
        try:
            doc = store.load_doc("diagnosis", doc_id)
        except Exception:
            continue
        if doc.get("run_id") != run_id or (doc.get("intervention") or {}).get("name") != "gold-context":
            continue
        stamp = max((str(v) for v in (doc.get("child_runs") or {}).values() if v), default="")
        if best is None or stamp > best[0]:
            best = (stamp, doc_id, doc)
    return (best[1], best[2]) if best else None


def _latest_decision(store: Store | None, run_id: str) -> tuple[str, dict[str, Any]] | None:
    """The release decision of a run stored last (`oloproof gate` or a session with `--oloproof-policy`), if any.

    Decisions are content-addressed, so "last" is the file written last (its modification time).
    """
    if store is None:
        return None
    best: tuple[float, str, dict[str, Any]] | None = None
    for doc_id in store.docs("decision"):
        try:
            doc = store.load_doc("decision", doc_id)
            stamp = store.doc_path("decision", doc_id).stat().st_mtime
        except (StoreError, OSError):  # unreadable, or removed since it was listed: not this page's decision
            continue
        if (doc.get("run") or {}).get("run_id") == run_id and (best is None or stamp > best[0]):
            best = (stamp, doc_id, doc)
    return (best[1], best[2]) if best else None


def _try_run(store: Store, ref: str | None) -> RunRecord | None:
    """A run record for a comparison page, or None when it is not in the store (a baseline file elsewhere)."""
    if not ref:
        return None
    try:
        return store.load_run(ref)
    except Exception:
        return None


def _reexecution_line(store: Store, doc: Mapping[str, Any]) -> str | None:
    """What a diagnosis's re-execution spent, from its child runs' case records (as `oloproof diagnose` prints it).

    None when no child run reported usage; a child run no longer in the store is left out, and the line says so.
    """
    from pytest_oloproof.usage.accounting import summarize

    from .text import reexecution_line
    from .views import UsageView

    cases: list[CaseRecord] = []
    pricing = None
    absent = 0
    for run_id in (doc.get("child_runs") or {}).values():
        if not run_id:
            continue
        try:
            record = store.load_run(run_id)
            cases += list(store.iter_cases(run_id))
        except Exception:
            absent += 1
            continue
        pricing = pricing or record.get("pricing")
    return reexecution_line(UsageView(summarize(cases, pricing), absent_runs=absent))


def run_page(
    record: Mapping[str, Any],
    store: Store | None = None,
    comparison: tuple[str, Mapping[str, Any], Mapping[str, Any] | None] | None = None,
    decision: tuple[str, Mapping[str, Any]] | None = None,
    *,
    in_folder: bool = False,
) -> str:
    """The run page; `comparison` is (id, document, baseline record) when the session compared the run,
    `decision` (id, document) when a release policy decided it alone."""
    comp_view = None
    if comparison is not None:
        comp_id, comp_doc, baseline = comparison
        comp_view = model.comparison_view(comp_doc, comp_id, record, baseline)
    elif decision is None:  # a page written later (`oloproof report RUN`): the run's last stored decision
        decision = _latest_decision(store, str(record.get("run_id")))
    view = model.run_view(
        record,
        diagnosis=_latest_diagnosis(store, str(record.get("run_id"))),
        comparison=comp_view,
        store_root=str(store.root) if store else None,
        decision=model.decision_view(decision[1], decision[0]) if decision else None,
    )
    return render_page(view, in_folder=in_folder)


def page_for(store: Store, ref: str, *, in_folder: bool = False) -> tuple[str, str, str]:
    """(kind, full id, HTML) for a run, diagnosis or comparison id or unique prefix."""
    kind, full = store.resolve(ref, kinds=("run", "diagnosis", "comparison"))
    if kind == "run":
        from pytest_oloproof.store.labels import corrected_rates

        record = store.load_run(full)
        record["corrected"] = corrected_rates(store, record)
        return kind, full, run_page(record, store, in_folder=in_folder)
    doc = store.load_doc(kind, full)
    if kind == "diagnosis":
        view = model.diagnosis_view(doc, full, _reexecution_line(store, doc))
        return kind, full, render_page(view, in_folder=in_folder)
    if kind == "comparison":
        cand = _try_run(store, (doc.get("candidate") or {}).get("run_id"))
        base = _try_run(store, (doc.get("baseline") or {}).get("run_id"))
        return kind, full, render_page(model.comparison_view(doc, full, cand, base), in_folder=in_folder)
    raise ValueError(f"{full}: a {kind} has no HTML page")


def write_page(path: Path, html: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, html)
    os.chmod(path, 0o644)  # a report is for reading (a CI artifact), unlike the store's private files


@dataclass
class Written:
    """What `write_index` wrote, and what it could not read (each named with its reason, never silently left out)."""

    pages: list[Path]
    problems: list[str]


def write_index(store: Store, directory: Path) -> Written:
    """index.html and one page per run, diagnosis and comparison of the store, side by side in `directory`."""
    written: list[Path] = []
    problems: list[str] = []
    headers = []
    for run_id in store.run_ids():
        try:
            record = store.load_run(run_id)
            html = run_page(record, store, in_folder=True)
        except Exception as exc:  # an unreadable record is listed as a problem; the other pages still get written
            problems.append(f"run {run_id}: {type(exc).__name__}: {exc}")
            continue
        headers.append({k: v for k, v in record.items() if k != "cases"})
        path = directory / model.page_name("run", run_id)
        write_page(path, html)
        written.append(path)
    docs = []
    for kind in ("diagnosis", "comparison"):
        for doc_id in store.docs(kind):
            try:
                _kind, full, html = page_for(store, doc_id, in_folder=True)
                doc = store.load_doc(kind, full)
            except Exception as exc:
                problems.append(f"{kind} {doc_id}: {type(exc).__name__}: {exc}")
                continue
            path = directory / model.page_name(kind, full)
            write_page(path, html)
            written.append(path)
            docs.append(_doc_row(kind, full, doc))
    index = directory / "index.html"
    write_page(index, render_page(model.index_view(str(store.root), headers, docs, problems)))
    return Written([index, *written], problems)


def _doc_row(kind: str, doc_id: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "diagnosis":
        what = f"{(doc.get('intervention') or {}).get('name')} · {doc.get('criterion')} · run {doc.get('run_id')}"
    else:
        what = (
            f"{(doc.get('candidate') or {}).get('run_id')} against {(doc.get('baseline') or {}).get('run_id')}"
            f" · gate {doc.get('gate') or 'no policy'}"
        )
    return {"kind": kind, "id": doc_id, "href": model.page_name(kind, doc_id), "what": what}
