"""The benchmarks' whole-tree measurement (benchmarks/_measure.py): every process's CPU and memory counted."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from _measure import Measured, Proc, Series, spread  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# The parent starts a helper in its own session (as a daemon a system starts may be) and exits without
# waiting for it; the helper burns CPU after its parent is gone. The parent lingers a few sampling
# intervals first, so the sampler sees both processes alive even on a loaded machine.
ORPHAN = textwrap.dedent(
    """
    import subprocess, sys, time
    child = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass\\n"
    subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
    time.sleep(0.3)
    """
)

# Parent and child each hold a block of memory at the same time; the parent waits until the
# child says it holds its block, then both hold theirs a while longer.
TWO_BLOCKS = textwrap.dedent(
    """
    import subprocess, sys, time
    child = "import sys, time\\nb = b'x' * (80 << 20)\\nprint('ready', flush=True)\\ntime.sleep(0.6)\\n"
    mine = b'y' * (40 << 20)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE)
    proc.stdout.readline()
    time.sleep(0.6)
    proc.wait()
    """
)


def measure(cmd: list[str], ok_codes: list[int] | None = None) -> Measured:
    """`_measure.measure(cmd)` in a process of its own: it makes its process a subreaper, which reaps
    whatever is re-parented to it, and that must not be this test process (or an xdist worker)."""
    script = (
        "import dataclasses, json, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "from _measure import measure\n"
        f"m = measure({cmd!r}, ok_codes={ok_codes!r})\n"
        "print(json.dumps(dataclasses.asdict(m)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.strip() or proc.returncode)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["procs"] = [Proc(**p) for p in data["procs"]]
    return Measured(**data)


def test_cpu_of_a_helper_that_outlives_its_parent_is_counted() -> None:
    m = measure([sys.executable, "-c", ORPHAN], ok_codes=[0])
    assert m.code == 0
    assert m.cpu_s >= 0.4  # the orphan's CPU: re-parented to the measuring process and reaped there
    assert len(m.procs) >= 2


def test_tree_peak_adds_the_processes_alive_together() -> None:
    m = measure([sys.executable, "-c", TWO_BLOCKS])
    assert m.code == 0
    assert m.tree_peak_mib >= 120  # 40 MiB in the parent + 80 MiB in the child, at the same time
    assert max(p.peak_mib for p in m.procs) < m.tree_peak_mib  # more than any one process
    assert m.sum_of_peaks_mib >= m.tree_peak_mib - 1  # the sum of own peaks bounds the sampled peak
    assert {p.label for p in m.procs} >= {"session"}


def test_exit_codes_outside_the_accepted_ones_stop_the_benchmark() -> None:
    with pytest.raises(SystemExit, match="exited 3"):
        measure([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], ok_codes=[0, 1])
    assert measure([sys.executable, "-c", "import sys; sys.exit(3)"]).code == 3


def test_series_ratios_pair_rounds_or_take_medians() -> None:
    s = Series()
    for bare, olo in ((1.0, 2.0), (2.0, 3.0), (4.0, 4.0)):
        s.add("bare", Measured(bare, bare, 10.0))
        s.add("cold", Measured(olo, olo * 2, 20.0))
    assert s.ratios("cold", "bare", "wall_s", paired=True) == [2.0, 1.5, 1.0]
    assert s.ratios("cold", "bare", "cpu_s", paired=False) == [3.0]  # median 6 over median 2
    assert spread([2.0, 1.5, 1.0]) == "1.50 [1.00–2.00]"
    assert "cold" in s.table("bare", paired=True, targets={"cold": ("CPU", 2.0)})
