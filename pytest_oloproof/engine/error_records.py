"""The record of a case that produced nothing but its error (system, contract, timeout, budget or internal),
and the user's traceback in it (Oloproof's own frames left out)."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from pytest_oloproof.records.cases import Case

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


class StageFailure(Exception):
    """A stage of the user's system raised: the case's error, with the user's traceback."""

    def __init__(self, stage: str, exc: BaseException, tb: str) -> None:
        self.stage, self.exc, self.tb = stage, exc, tb
        super().__init__(text_of(exc))


def stage_failure(stage: str, exc: BaseException) -> StageFailure:
    """The stage's error as the user raised it: a StopIteration a coroutine turned into RuntimeError is itself."""
    cause = exc.__cause__
    if isinstance(exc, RuntimeError) and isinstance(cause, (StopIteration, StopAsyncIteration)):
        if text_of(exc) == f"coroutine raised {type(cause).__name__}":
            exc = cause
    return StageFailure(stage, exc, user_traceback(exc))


def text_of(exc: BaseException) -> str:
    """str(exc), even for an exception whose __str__ itself raises (then says so)."""
    try:
        return str(exc)
    except Exception as inner:
        return f"<str() of the {type(exc).__name__} raised {type(inner).__name__}>"


def user_traceback(exc: BaseException) -> str:
    """The traceback from the system's own code on: Oloproof's driver frames are noise to the user."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def error_record(
    case_id: str, plan_label: str, error: dict[str, Any], cache: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The record of a case that produced nothing but its error (system, timeout or internal)."""
    return {
        "id": case_id,
        "plan": plan_label,
        "retrieval": None,
        "context": None,
        "dropped": [],
        "context_truncated": False,
        "output": None,
        "error": error,
        "cache": cache if cache is not None else {"execution": "miss", "retrieve": None, "generate": None},
    }


def timeout_error(timeout_s: float | None) -> dict[str, Any]:
    """The error entry of a case that did not finish within its timeout."""
    return {
        "stage": "timeout",
        "type": "Timeout",
        "message": f"case did not finish within timeout_s={timeout_s}",
        "traceback": "",
        "transient": False,
        "reason": "timeout",
    }


def internal_error(exc: BaseException) -> dict[str, Any]:
    """The error entry of a case that hit an error in Oloproof's own code, with the traceback."""
    return {
        "stage": "oloproof",
        "type": type(exc).__name__,
        "message": f"internal error in Oloproof: {type(exc).__name__}: {text_of(exc)}",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "transient": False,
        "reason": "internal_error",
    }


def internal_error_record(case: Case, exc: BaseException, plan_label: str = "normal") -> dict[str, Any]:
    """A case that hit an error in Oloproof's own code: recorded, every criterion missing, with the traceback."""
    return error_record(case.id, plan_label, internal_error(exc))
