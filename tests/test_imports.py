"""Heavy libraries load only when used: every pytest session with the plugin installed pays for its imports."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import pytest_oloproof.plugin, pytest_oloproof.runner, pytest_oloproof.evaluators.judges, pytest_oloproof.cache
print(sorted(m for m in ("httpx", "scipy.stats", "diskcache") if m in sys.modules))
"""


def test_the_core_imports_neither_httpx_nor_scipy_stats_nor_diskcache_up_front() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
