"""The session: one run's lifecycle (prepare, start, one case at a time, interrupt, finish), used by both faces.

The pytest plugin's hooks and the `oloproof` command drive a `RunSession`; what only a face can do (fixtures,
items, the terminal, rendering) reaches it through `Face`. May import every core folder (diagnose, compare,
engine and below); never pytest, the plugin, the CLI or report.
"""

from __future__ import annotations

from .interrupts import NotedInterrupts, Terminated, drop_lineless_frames
from .run import SESSION_PLUGIN_NAME, CannotStart, Face, RunEnd, RunSession, SessionOptions, load_setup

__all__ = [
    "SESSION_PLUGIN_NAME",
    "CannotStart",
    "Face",
    "NotedInterrupts",
    "RunEnd",
    "RunSession",
    "SessionOptions",
    "Terminated",
    "drop_lineless_frames",
    "load_setup",
]
