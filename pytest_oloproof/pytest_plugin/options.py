"""The `--oloproof-*` options and ini keys, and the session options read from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_oloproof.cache.caches import CacheMode, parse_mode
from pytest_oloproof.config.values import parse_positive_int, parse_shard
from pytest_oloproof.errors import OloproofError
from pytest_oloproof.session import SessionOptions

#: pytest's options (their dests) under which it only lists: items, fixtures, the cache; never runs a case
_LISTING_OPTIONS = ("collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "cacheshow")


def _positive_int(value: str) -> int:
    try:
        return parse_positive_int(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _shard(value: str) -> tuple[int, int]:
    try:
        return parse_shard(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--oloproof-shard: {exc}") from None


def _repeats(value: str) -> int:
    try:
        return parse_positive_int(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--oloproof-repeats: {exc} (how many times each case's generation runs)") from None


def _cache_mode(value: str) -> CacheMode:
    try:
        return parse_mode(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("oloproof", "Oloproof: RAG evaluation")
    group.addoption("--oloproof", action="store_true", dest="oloproof", help="run the Oloproof evaluation")
    group.addoption("--oloproof-config", dest="oloproof_config", metavar="PATH", help="oloproof.yaml to use")
    group.addoption(
        "--oloproof-cache",
        dest="oloproof_cache",
        type=_cache_mode,
        default=None,
        metavar="MODE",
        help="off|read|write|refresh (default: read and write)",
    )
    group.addoption(
        "--oloproof-concurrency",
        dest="oloproof_concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="cases executing at once (overrides `concurrency`)",
    )
    group.addoption(
        "--oloproof-repeats",
        dest="oloproof_repeats",
        type=_repeats,
        default=None,
        metavar="N",
        help="run each case's generation N times (overrides `repeats`)",
    )
    group.addoption("--oloproof-report", dest="oloproof_report", metavar="PATH", help="write the JSON run report")
    group.addoption(
        "--oloproof-html",
        dest="oloproof_html",
        metavar="PATH",
        help="write the run's self-contained HTML report (with the comparison when a baseline is given)",
    )
    group.addoption("--oloproof-diagnose", dest="oloproof_diagnose", metavar="RUN_ID", help="diagnose a run")
    group.addoption(
        "--oloproof-intervention",
        dest="oloproof_intervention",
        default="gold-context",
        metavar="NAME",
        help="gold-context | top-k | reranker | token-budget",
    )
    group.addoption("--oloproof-criterion", dest="oloproof_criterion", metavar="NAME", help="criterion to diagnose")
    group.addoption(
        "--oloproof-top-k",
        dest="oloproof_top_k",
        type=_positive_int,
        metavar="N",
        help="the top-k cut to replay with (--oloproof-intervention top-k)",
    )
    group.addoption(
        "--oloproof-reranker",
        dest="oloproof_reranker",
        metavar="MODULE:FUNCTION",
        help="function(query, candidates) -> candidates to replay with (--oloproof-intervention reranker)",
    )
    group.addoption(
        "--oloproof-token-budget",
        dest="oloproof_token_budget",
        type=_positive_int,
        metavar="N",
        help="the token budget to replay with (--oloproof-intervention token-budget)",
    )
    group.addoption("--oloproof-fresh", dest="oloproof_fresh", action="store_true", help="re-run child runs")
    group.addoption(
        "--oloproof-baseline",
        dest="oloproof_baseline",
        metavar="RUN_ID|FILE",
        help="compare this run with a baseline run (id, prefix, latest, latest~N, or run-record JSON)",
    )
    group.addoption(
        "--oloproof-policy",
        dest="oloproof_policy",
        metavar="PATH",
        help="release policy deciding this run (with --oloproof-baseline, the comparison); exit 3 on BLOCK",
    )
    group.addoption(
        "--oloproof-shard",
        dest="oloproof_shard",
        type=_shard,
        default=None,
        metavar="I/N",
        help="run only shard I of N (I counted from 1: 1/4 … 4/4), chosen by a hash of each case id; "
        "the run is recorded as partial: combine the shards' runs with `oloproof merge`",
    )
    parser.addini("oloproof_config", "path of oloproof.yaml (default: <rootdir>/oloproof.yaml)", default="")
    parser.addini(
        "oloproof_progress",
        "live progress line: auto (only when the output is a terminal) | on | off",
        default="auto",
    )
    parser.addini("oloproof_progress_interval", "seconds between progress lines (and before the first)", default="2")


def session_options(config: pytest.Config) -> SessionOptions:
    """The session's options; oloproof.yaml is added to the paths pytest collects when pytest chose them itself."""
    from pytest_oloproof.config.settings import find_config

    opt = config.getoption
    here = Path(config.invocation_params.dir)
    config_path, config_error = None, None
    try:
        config_path = find_config(opt("oloproof_config") or _ini_config_path(config), Path(config.rootpath), here)
    except OloproofError as exc:
        config_error = exc
    workerinput = getattr(config, "workerinput", None)
    return SessionOptions(
        config_path=config_path,
        invocation_dir=here,
        config_error=config_error,
        cache_mode=opt("oloproof_cache") or CacheMode.READWRITE,
        concurrency=opt("oloproof_concurrency"),
        repeats=opt("oloproof_repeats"),
        report=opt("oloproof_report"),
        html=opt("oloproof_html"),
        diagnose=opt("oloproof_diagnose"),
        intervention=opt("oloproof_intervention") or "gold-context",
        criterion=opt("oloproof_criterion"),
        top_k=opt("oloproof_top_k"),
        reranker=opt("oloproof_reranker"),
        token_budget=opt("oloproof_token_budget"),
        fresh=bool(opt("oloproof_fresh")),
        baseline=opt("oloproof_baseline"),
        policy=opt("oloproof_policy"),
        shard=opt("oloproof_shard"),
        lists_only=any(opt(name, None) for name in _LISTING_OPTIONS),
        is_worker=workerinput is not None,
        budget_share=(workerinput or {}).get("oloproof_budget"),
        left_out_by_args=_left_out_by_args(config, config_path),
    )


def _left_out_by_args(config: pytest.Config, target: Path | None) -> bool:
    """Collect oloproof.yaml when pytest chose the paths itself (testpaths, the current folder); True when
    paths named on the command line leave it out (`pytest --oloproof test_normal.py` runs test_normal.py only).
    """
    if target is None:
        return False
    for a in config.args:
        p = Path(a.split("::", 1)[0])
        p = p if p.is_absolute() else Path(config.invocation_params.dir) / p
        try:
            if p.resolve() == target or target.is_relative_to(p.resolve()):
                return False
        except OSError:
            continue
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return True
    config.args.append(str(target))
    return False


def _ini_config_path(config: pytest.Config) -> str | None:
    """The `oloproof_config` ini value, relative to the ini file's folder as pytest does for paths."""
    ini = str(config.getini("oloproof_config") or "").strip()
    if not ini:
        return None
    path = Path(ini)
    if not path.is_absolute() and config.inipath is not None:
        path = config.inipath.parent / path
    return str(path)


def progress_interval(config: pytest.Config) -> float | None:
    """Seconds between progress lines, when a progress line is shown (`oloproof_progress`)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    mode = str(config.getini("oloproof_progress") or "auto").strip().lower()
    if tr is None or mode == "off":
        return None
    tty = tr.isatty  # an attribute on pytest 8.0, a method since
    if mode != "on" and not (bool(tty() if callable(tty) else tty) and int(config.get_verbosity()) > -2):
        return None
    try:
        return max(float(config.getini("oloproof_progress_interval")), 0.0)
    except ValueError:
        raise pytest.UsageError(
            "oloproof_progress_interval: expected a number of seconds, "
            f"got {config.getini('oloproof_progress_interval')!r}"
        ) from None
