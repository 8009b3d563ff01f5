"""The session: one run's lifecycle (prepare, start, one case at a time, interrupt, finish), used by both faces.

The pytest plugin's hooks drive a `RunSession` (and `oloproof run` is pytest with the plugin, reading the
session's outcome); what only pytest can do (the evaluator registry its plugins fill, the terminal, stopping the
session, JUnit properties) reaches it through `Face`. At the finish it writes the run record, the decision and
the reports through report/'s renderers. May import report/ and every core folder; never pytest, the plugin or
the CLI.
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
