"""`oloproof validate-judge`: measure a configured judge against human labels and record the result."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ConfigError
from pytest_oloproof.evaluate.record import judge_one
from pytest_oloproof.evaluators.base import CriterionValue, EvalInput

from . import core as cli


class JudgeNotPassed(ConfigError):
    """The validation was recorded but the judge did not pass it: exit 1."""

    exit_code = cli.EXIT_FAILED


def _number_in(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (`nan` would make every comparison false)."""

    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = math.nan
        if not low <= x <= high:
            raise argparse.ArgumentTypeError(f"expected a number from {low:g} to {high:g}, got {value!r}")
        return x

    return parse


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("validate-judge", help="measure a judge's agreement with human labels")
    p.add_argument("--criterion", required=True, help="criterion of a configured judge (e.g. grounded)")
    p.add_argument("--labels", required=True, metavar="JSONL", help="labelled examples (see docs)")
    p.add_argument(
        "--min-labels", type=cli.positive_int, default=30, help="fewest judged examples to pass (default 30)"
    )
    p.add_argument(
        "--min-kappa", type=_number_in(-1.0, 1.0), default=0.6, help="least Cohen's kappa to pass (default 0.6)"
    )
    p.add_argument(
        "--min-accuracy",
        type=_number_in(0.0, 1.0),
        default=0.8,
        help="least lower bound of accuracy to pass (default 0.8)",
    )
    common(p)


def cmd_validate_judge(args: argparse.Namespace) -> int:
    from pytest_oloproof.engine.setup import RunSetup
    from pytest_oloproof.evaluate.judge_validation import validate_judge  # scipy: imported only when validating

    config = Path(args.config or "oloproof.yaml")
    if not config.is_file():
        raise ConfigError(f"--config: {config} does not exist (validate-judge reads the judge from oloproof.yaml)")
    ev = RunSetup.load(config, load_case_files=False)
    judge = next((e for e in ev.evaluators if e.criterion == args.criterion), None)
    judges = [e.criterion for e in ev.evaluators if e.type.endswith("_judge")]
    if judge is None or not judge.type.endswith("_judge"):
        raise ConfigError(
            f"--criterion: {args.criterion!r} is not a judge criterion of {config} "
            f"(judges configured: {', '.join(judges) or 'none'})"
        )
    labels = Path(args.labels)

    def call(x: EvalInput) -> CriterionValue:
        return judge_one(judge, x, ev.caches)

    record = validate_judge(
        judge,
        labels,
        confidence=ev.cfg.settings.confidence,
        seed=ev.cfg.settings.seed,
        min_labels=args.min_labels,
        min_kappa=args.min_kappa,
        min_accuracy=args.min_accuracy,
        call=call,
    )
    doc_id = ev.store.save_doc("judge_validation", record)
    ev.caches.close()
    lines = validation_lines(record, doc_id)
    cli._emit(args, {"id": doc_id, **record}, lines)
    return cli.EXIT_OK if record["passed"] else cli.EXIT_FAILED


def validation_lines(record: dict[str, Any], doc_id: str) -> list[str]:
    acc, kappa = record["agreement"], record["kappa"]

    def num(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    lines = [
        f"Judge {record['judge']['type']} ({record['judge']['criterion']}) {record['judge']['identity']}",
        f"Labels: {record['n']} examples, {record['judged']} judged, {record['judge_failures']} judge failures",
        f"Agreement: {num(acc.get('accuracy'))} [{num(acc.get('low'))}, {num(acc.get('high'))}]",
        f"Cohen's kappa: {num(kappa.get('value'))} [{num(kappa.get('low'))}, {num(kappa.get('high'))}]",
        *confusion_lines(record.get("confusion")),
        f"Validation: {'PASSED' if record['passed'] else 'NOT PASSED'}"
        + ("" if record["passed"] else " — " + "; ".join(record.get("reasons") or [])),
        f"Validation {doc_id}",
    ]
    return lines


def confusion_lines(confusion: Mapping[str, Any] | None) -> list[str]:
    """The judged examples as a 2x2 table: human label by judge verdict (failures are not in it)."""
    if not confusion:
        return []
    cells = {k: int(v) for k, v in confusion.items()}
    pp, pf = cells.get("human_pass_judge_pass", 0), cells.get("human_pass_judge_fail", 0)
    fp, ff = cells.get("human_fail_judge_pass", 0), cells.get("human_fail_judge_fail", 0)
    rows = [
        ("", "judge pass", "judge fail", "total"),
        ("human pass", str(pp), str(pf), str(pp + pf)),
        ("human fail", str(fp), str(ff), str(fp + ff)),
        ("total", str(pp + fp), str(pf + ff), str(pp + pf + fp + ff)),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    body = [
        "  " + r[0].ljust(widths[0]) + "".join("  " + c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))
        for r in rows
    ]
    return ["Confusion (human label × judge verdict, judged examples only):", *body]


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    return validation_lines(doc, doc_id)


SUBCOMMAND = cli.Subcommand("validate-judge", _add, cmd_validate_judge, inspects="judge_validation", inspect=_inspect)
