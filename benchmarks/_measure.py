"""Measuring a whole process tree: wall time, CPU time of every process in it, and its peak memory.

`measure(cmd)` starts `cmd` and, until it and every process it started have ended:

- CPU: this process is made a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`), so a
  helper that outlives the session is re-parented here rather than to init; every process of
  the tree is reaped here or by its own parent, and `getrusage(RUSAGE_CHILDREN)` before and after
  gives user + system time of the whole tree;
- memory: a thread walks the tree (`/proc/<pid>/task/*/children`) every `sample_s` and adds up
  the resident set sizes (`VmRSS`) of the processes alive at that moment: the peak of that sum is
  the tree's peak. It also keeps each process's own peak (`VmHWM`), so the sum of per-process
  peaks (an upper bound, what you get by measuring each helper and adding) is reported too;
- wall: from the start until the last process of the tree is reaped.

Linux only (it reads /proc). Measurements must not overlap: a subreaper reaps whatever is
re-parented to it, so `measure` is called from one thread at a time.
"""

from __future__ import annotations

import ctypes
import os
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER = False


def _become_subreaper() -> None:
    global _SUBREAPER
    if _SUBREAPER:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    _SUBREAPER = True


@dataclass
class Proc:
    """One process seen in the tree: what it is, and the most it held resident."""

    pid: int
    label: str
    peak_mib: float = 0.0


@dataclass
class Measured:
    """The figures of one measured run of a command."""

    wall_s: float
    cpu_s: float  # user + system of every process of the tree
    tree_peak_mib: float  # peak of the sampled sum of resident sizes
    procs: list[Proc] = field(default_factory=list)
    code: int = 0
    output: str = ""

    @property
    def sum_of_peaks_mib(self) -> float:
        """Each process's own peak, added up (what measuring each helper and adding gives)."""
        return sum(p.peak_mib for p in self.procs)

    def peaks_text(self) -> str:
        return " + ".join(f"{p.label} {p.peak_mib:.0f}" for p in self.procs)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def _status(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) in MiB, or None once the process is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024.0
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024.0
    if rss is None or hwm is None:
        return None
    return rss, hwm


def _label(pid: int, root: int) -> str:
    if pid == root:
        return "session"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode("utf-8", "replace")
    except OSError:
        return "process"
    if "exec(eval(sys.stdin" in argv:  # how execnet starts a pytest-xdist worker
        return "xdist-worker"
    return "process"


class _Sampler(threading.Thread):
    def __init__(self, root: int, every_s: float) -> None:
        super().__init__(name="tree-sampler", daemon=True)
        self.root, self.every_s = root, every_s
        self.stop = threading.Event()
        self.peak = 0.0
        self.procs: dict[int, Proc] = {}

    def sample(self) -> None:
        total, todo, seen = 0.0, [self.root], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            st = _status(pid)
            if st is None:
                continue
            rss, hwm = st
            total += rss
            proc = self.procs.get(pid)
            if proc is None:
                proc = self.procs[pid] = Proc(pid, _label(pid, self.root))
            elif proc.label == "process":  # first seen between fork and exec
                proc.label = _label(pid, self.root)
            proc.peak_mib = max(proc.peak_mib, hwm, rss)
            todo.extend(_children(pid))
        # a helper re-parented to us after the session ended is still part of the tree
        for pid in list(self.procs):
            if pid not in seen:
                st = _status(pid)
                if st is not None:
                    total += st[0]
                    self.procs[pid].peak_mib = max(self.procs[pid].peak_mib, st[1])
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.every_s)


def measure(
    cmd: Sequence[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    *,
    sample_s: float = 0.02,
    ok_codes: Sequence[int] | None = (0, 1),
) -> Measured:
    """Run `cmd` and measure its whole process tree (see the module docstring)."""
    _become_subreaper()
    _reap_strays()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env) if env is not None else None, stdout=out, stderr=subprocess.STDOUT
        )
        sampler = _Sampler(proc.pid, sample_s)
        sampler.start()
        _, status, _ = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        # helpers the session left running were re-parented here: wait for them too
        while True:
            try:
                os.wait4(-1, 0)
            except ChildProcessError:
                break
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    procs = sorted(sampler.procs.values(), key=lambda p: (p.label != "session", p.label, p.pid))
    m = Measured(wall, cpu, sampler.peak, procs, proc.returncode, text)
    if ok_codes is not None and m.code not in ok_codes:
        raise SystemExit(f"{' '.join(cmd)} exited {m.code}:\n{text[-4000:]}")
    return m


def _reap_strays() -> None:
    """Reap anything left from an earlier measurement, so its CPU is not counted in the next one."""
    while True:
        try:
            pid, _, _ = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ------------------------------------------------------------------ summaries


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """'median [min–max]' of the values (just the value when there is one)."""
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


@dataclass
class Series:
    """Measurements of several kinds of run over rounds, and their ratios to a baseline kind."""

    runs: dict[str, list[Measured]] = field(default_factory=dict)

    def add(self, kind: str, m: Measured) -> None:
        self.runs.setdefault(kind, []).append(m)

    def ratios(self, kind: str, base: str, attr: str, paired: bool) -> list[float]:
        """Per-round ratios (paired: round i over round i of the baseline), else median over median."""
        a = [getattr(m, attr) for m in self.runs.get(kind, [])]
        b = [getattr(m, attr) for m in self.runs.get(base, [])]
        if not a or not b:
            return []
        if paired:
            return [x / y for x, y in zip(a, b, strict=False)]
        return [statistics.median(a) / statistics.median(b)]

    def table(self, base: str, paired: bool, targets: Mapping[str, tuple[str, float]] | None = None) -> str:
        """Medians [min–max] of wall, CPU and tree peak per kind, then ratios to `base`."""
        lines = [f"{'':14} {'wall s':>22} {'CPU s (tree)':>22} {'peak MiB (tree)':>22}"]
        for kind, ms in self.runs.items():
            lines.append(
                f"{kind:14} {spread([m.wall_s for m in ms]):>22} {spread([m.cpu_s for m in ms]):>22} "
                f"{spread([m.tree_peak_mib for m in ms], '{:.0f}'):>22}"
            )
        how = "per-round ratios, median [min–max]" if paired else "median over median"
        lines.append(f"ratios to {base} ({how}):")
        for kind in self.runs:
            if kind == base:
                continue
            wall = spread(self.ratios(kind, base, "wall_s", paired))
            cpu = spread(self.ratios(kind, base, "cpu_s", paired))
            mem = spread(self.ratios(kind, base, "tree_peak_mib", paired))
            line = f"  {kind:12} wall {wall:>18}x   CPU {cpu:>18}x   peak {mem:>18}x"
            if targets and kind in targets:
                what, limit = targets[kind]
                line += f"   (target: {what} <= {limit}x)"
            lines.append(line)
        return "\n".join(lines)
