"""Heavy libraries load only when used: every pytest session with the plugin installed pays for its imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from oloproof_project import case, make_project

CHECK = """
import sys
import pytest_oloproof.pytest_plugin.plugin, pytest_oloproof.session
import pytest_oloproof.evaluators.judges, pytest_oloproof.cache.caches
print(sorted(m for m in ("httpx", "scipy.stats", "diskcache") if m in sys.modules))
"""


def test_the_core_imports_neither_httpx_nor_scipy_stats_nor_diskcache_up_front() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


WATCH = """
import json, sys


def pytest_unconfigure(config):
    heavy = ("scipy.stats", "scipy.optimize", "scipy.special", "jinja2", "httpx")
    with open("modules.json", "w") as f:
        json.dump({m: m in sys.modules for m in heavy}, f)
"""


def test_a_run_computes_its_intervals_without_scipy_stats(pytester: pytest.Pytester) -> None:
    # exact Clopper-Pearson needs scipy.special's beta quantile, not scipy.stats (0.8 s to import)
    make_project(
        pytester,
        [case(f"c{i}", answer="yes" if i % 3 else "no", expected={"answer": "yes"}) for i in range(13)],
        [{"type": "contains", "criterion": "answer_correct", "field": "answer", "expected_field": "answer"}],
    )
    pytester.makeconftest(WATCH)
    result = pytester.runpytest_subprocess("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, failed=5)
    assert "answer_correct │ 61.5%    │ [31.5%, 86.2%]" in result.stdout.str()
    loaded = json.loads((pytester.path / "modules.json").read_text())
    assert loaded == {
        "scipy.stats": False,
        "scipy.optimize": False,
        "scipy.special": True,
        "jinja2": False,
        "httpx": False,
    }
