"""`oloproof labels export|import`: a random sample of a run's judged cases for people to label, and
the labels stored with the sample's provenance, so reports and the gate can correct the judge's rate."""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ConfigError, ExitCode

from . import core as cli


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("labels", help="export a random sample of judged cases to label; import the labels")
    actions = p.add_subparsers(dest="labels_action", required=True, parser_class=type(p))
    e = actions.add_parser("export", help="draw a uniform random sample of a run's judged cases for people to label")
    e.add_argument("run", metavar="RUN", help="run id, unique prefix, latest or latest~N")
    e.add_argument("--criterion", required=True, help="the judge's criterion (e.g. grounded)")
    e.add_argument("--sample", required=True, type=cli.positive_int, metavar="N", help="how many cases to draw")
    e.add_argument("--seed", type=int, help="the draw's seed (default: a new random one, recorded in the file)")
    e.add_argument("--out", metavar="FILE", help="the file to write (default: labels-<criterion>-<run>.jsonl)")
    common(e)
    i = actions.add_parser("import", help="check a labelled file against its run and store the labels")
    i.add_argument("file", metavar="FILE", help="the file `oloproof labels export` wrote, with every label set")
    common(i)


def cmd_labels(args: argparse.Namespace) -> int:
    return _export(args) if args.labels_action == "export" else _import(args)


def _export(args: argparse.Namespace) -> int:
    from pytest_oloproof.store.files import atomic_write_text, output_problem
    from pytest_oloproof.store.labels import draw_sample, labelling_lines

    store = cli._store_from(args)
    run = store.load_run(args.run)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
    sample = draw_sample(run, args.criterion, args.sample, seed)
    out = Path(args.out or f"labels-{args.criterion}-{run['run_id']}.jsonl")
    if out.exists():
        raise ConfigError(f"--out: {out} already exists; name another file or delete it (never overwritten)")
    problem = output_problem(out)
    if problem:
        raise ConfigError(f"--out: cannot write {out}: {problem}")
    atomic_write_text(out, "\n".join(labelling_lines(run, sample)) + "\n")
    frame = sample["frame"]
    lines = [
        f"Drew {sample['size']} of {frame['size']} cases with an observed {args.criterion!r} verdict in run "
        f"{run['run_id']} (seed {seed}, frame {frame['digest'][:19]}…)",
        f'Wrote {out}: set each line\'s `label` to "pass" or "fail" (the judge\'s verdict is not shown, so it '
        "cannot anchor you);",
        "label every line and keep the first line as it is, then run: oloproof labels import " + str(out),
    ]
    cli._emit(args, {"file": str(out), "sample": sample}, lines)
    return ExitCode.OK


def _import(args: argparse.Namespace) -> int:
    from pytest_oloproof.store.labels import (
        check_against_run,
        corrected_for,
        labels_doc,
        read_labelled,
        stored_labels,
    )

    path = Path(args.file)
    labelled = read_labelled(path)
    store = cli._store_from(args)
    run = store.load_run(str(labelled.sample.get("run_id")))
    check_against_run(run, labelled.sample, path)
    doc = labels_doc(labelled.sample, labelled.labels)
    doc_id = store.save_doc("labels", doc)
    criterion = str(doc["criterion"])
    corrected = corrected_for(run, stored_labels(store), criterion)
    lines = [
        f"Stored labels {doc_id} for {len(doc['labels'])} sampled cases of run {run['run_id']} "
        f"(criterion {criterion}, seed {doc['sample']['seed']})",
    ]
    from pytest_oloproof.report.text import corrected_line

    if corrected is not None:
        lines.append(corrected_line(criterion, corrected))
    cli._emit(args, {"id": doc_id, **doc, "corrected": corrected}, lines)
    return ExitCode.OK


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    pos = sum(1 for r in doc.get("labels") or [] if r.get("label") == "pass")
    n = len(doc.get("labels") or [])
    return [
        f"Labels {doc_id}: {n} sampled cases of run {doc.get('run_id')}, criterion {doc.get('criterion')}, "
        f"{pos} labelled pass (seed {(doc.get('sample') or {}).get('seed')}, "
        f"frame of {((doc.get('sample') or {}).get('frame') or {}).get('size')} judged cases)",
    ]


SUBCOMMAND = cli.Subcommand("labels", _add, cmd_labels, inspects="labels", inspect=_inspect)
