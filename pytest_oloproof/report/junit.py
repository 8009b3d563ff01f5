"""JUnit `user_properties`, so `--junitxml` carries the evaluation: each case's criterion values
(`oloproof.<criterion>`) and the session gate's outcome (`oloproof.gate`, `oloproof.decision.<name>`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .views import GateView


def junit_value(c: Mapping[str, Any]) -> Any:
    """The property value of one criterion of a case: its value when observed, else `missing: reason` /
    `excluded: reason`."""
    return c["value"] if c["status"] == "observed" else f"{c['status']}: {c.get('reason')}"


def gate_properties(gate: GateView | Any) -> list[tuple[str, Any]]:
    """Session-level properties: the gate, the stored document's id and each decision's outcome (none for a
    comparison without a policy, or a gate that could not decide)."""
    view = gate if isinstance(gate, GateView) else GateView.of(gate)
    if view.decision is not None:
        found: tuple[str, Any, Any] = (view.decision.doc_id, view.decision.gate, view.decision.decisions)
    elif view.comparison is not None and view.comparison.has_policy:
        found = (view.comparison.doc_id, view.comparison.gate, view.comparison.decisions)
    else:
        return []
    doc_id, outcome, decisions = found
    props: list[tuple[str, Any]] = [("oloproof.gate", outcome), ("oloproof.gate.id", doc_id)]
    props += [(f"oloproof.decision.{d['name']}", d["outcome"]) for d in decisions]
    return props
