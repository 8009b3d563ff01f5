"""Criterion values as JUnit `user_properties`, so `--junitxml` carries them (`oloproof.<criterion>`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def junit_value(c: Mapping[str, Any]) -> Any:
    """The property value of one criterion: its value when observed, else `missing: reason` / `excluded: reason`."""
    return c["value"] if c["status"] == "observed" else f"{c['status']}: {c.get('reason')}"
