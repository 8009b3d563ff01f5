"""Subcommands that live beside their core modules register themselves here.

Each *_cli module is light: the core it drives (and scipy) is imported only when its command runs.
"""

from __future__ import annotations

from . import compare_cli, diagnose_cli, judge_cli, report_cli  # noqa: F401
