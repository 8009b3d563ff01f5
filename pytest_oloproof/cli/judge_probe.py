"""`oloproof judge probe RUN --criterion C --times K`: how often a run's judge changes its verdict when asked again."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_oloproof.errors import ConfigError, ExitCode

from . import core as cli


def _add(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("judge", help="look into a run's LLM judge (judge probe: does its verdict flip?)")
    actions = p.add_subparsers(dest="judge_command", metavar="ACTION", required=True)
    probe = actions.add_parser(
        "probe", help="ask the run's judge again K times on the same recorded inputs and count flipped verdicts"
    )
    probe.add_argument("run_id", metavar="RUN_ID", help="run id, unique prefix, latest, latest~N")
    probe.add_argument("--criterion", required=True, help="criterion of a configured judge (e.g. grounded)")
    probe.add_argument("--times", type=cli.positive_int, required=True, metavar="K", help="extra asks per case")
    common(probe)


def cmd_judge(args: argparse.Namespace) -> int:
    from pytest_oloproof.diagnose.judge_probe import JudgeProbe, ProbeError, announce
    from pytest_oloproof.report.text import judge_probe_lines
    from pytest_oloproof.session import load_setup

    config = Path(args.config or "oloproof.yaml")
    if not config.is_file():
        raise ConfigError(f"--config: {config} does not exist (judge probe reads the judge from oloproof.yaml)")
    ev, cache_warning = load_setup(config.resolve(), store=Path(args.store).resolve() if args.store else None)
    if cache_warning is not None:
        sys.stderr.write(f"oloproof: warning: {cache_warning}\n")
    try:
        try:
            probe = JudgeProbe(ev, args.run_id, args.criterion, args.times)
        except ProbeError as exc:
            raise ConfigError(str(exc)) from None
        announce(probe, sys.stderr.write)
        doc_id, doc = probe.run_all()
    finally:
        ev.caches.close()
    cli._emit(args, {"id": doc_id, **doc}, judge_probe_lines(doc, doc_id))
    return ExitCode.OK


def _inspect(doc: dict[str, Any], doc_id: str) -> list[str]:
    from pytest_oloproof.report.text import judge_probe_lines

    return judge_probe_lines(doc, doc_id)


SUBCOMMAND = cli.Subcommand("judge", _add, cmd_judge, inspects="judge_probe", inspect=_inspect)
