"""`oloproof validate-judge`: measure a configured judge against human labels and record the result."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ConfigError, ExitCode
from pytest_oloproof.evaluate.record import judge_one
from pytest_oloproof.evaluators.base import CriterionValue, EvalInput

from . import core as cli


class JudgeNotPassed(ConfigError):
    """The validation was recorded but the judge did not pass it: exit 1."""

    exit_code = ExitCode.FAILED


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
    from pytest_oloproof.diagnose.judge_probe import latest_probe
    from pytest_oloproof.report.text import judge_probe_summary, judge_validation_lines

    out, lines = {"id": doc_id, **record}, judge_validation_lines(record, doc_id)
    probe = latest_probe(ev.store, record["judge"]["identity"])  # how often this judge flips (oloproof judge probe)
    if probe is not None:
        probe_id, probe_doc = probe
        out["consistency"] = {"probe": probe_id, "run_id": probe_doc["run_id"], "times": probe_doc["times"]}
        out["consistency"]["flip_rate"] = probe_doc["flip_rate"]
        lines.append(f"Consistency (probe {probe_id} of run {probe_doc['run_id']}): {judge_probe_summary(probe_doc)}")
    else:
        lines.append("Consistency: not probed (oloproof judge probe RUN --criterion C --times K)")
    cli._emit(args, out, lines)
    return ExitCode.OK if record["passed"] else ExitCode.FAILED


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    from pytest_oloproof.report.text import judge_validation_lines

    return judge_validation_lines(doc, doc_id)


SUBCOMMAND = cli.Subcommand("validate-judge", _add, cmd_validate_judge, inspects="judge_validation", inspect=_inspect)
