"""The helper processes of a long session (cache writer, stats worker): how they start, and kept out of forks."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import weakref
from pathlib import Path
from typing import IO

#: Every message between a session and its helpers: an 8-byte big-endian length, then that many bytes.
_LENGTH = struct.Struct(">Q")

_LIVE: weakref.WeakSet[subprocess.Popen[bytes]] = weakref.WeakSet()
_FORK_HOOK = False


def spawn(module: str, *args: str) -> subprocess.Popen[bytes]:
    """Start `pytest_oloproof.<module>.main()` in a child process, with pipes for stdin and stdout.

    The child loads this very copy of the package by path (not whatever copy its
    sys.path would find first), runs in its own process group so Ctrl-C reaches
    only the session (and ignores SIGINT: the session tells it when to stop), and
    its pipe ends are closed in processes forked from the session, so it sees the
    end of its input when the session closes it.
    """
    package = Path(__file__).resolve().parent
    boot = (
        "import importlib.util, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        f"spec = importlib.util.spec_from_file_location('pytest_oloproof', {str(package / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(package)!r}])\n"
        "package = importlib.util.module_from_spec(spec)\n"
        "sys.modules['pytest_oloproof'] = package\n"
        "spec.loader.exec_module(package)\n"
        f"from pytest_oloproof.{module} import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _LIVE.add(proc)
    global _FORK_HOOK
    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_release_pipes_in_fork)
        _FORK_HOOK = True
    return proc


def _release_pipes_in_fork() -> None:
    """In a process forked from the session (a system's multiprocessing pool, say), point the helpers'
    pipe ends at /dev/null: otherwise the fork keeps a helper's input open after the session is gone."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    try:
        for proc in list(_LIVE):
            for stream in (proc.stdin, proc.stdout):
                if stream is not None and not stream.closed:
                    try:
                        os.dup2(null, stream.fileno())
                    except (OSError, ValueError):
                        pass
    finally:
        os.close(null)


def frame(payload: bytes) -> bytes:
    """One message: its length, then the payload (an empty payload says "no more")."""
    return _LENGTH.pack(len(payload)) + payload


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next message's payload; None at the end of input or in the middle of a message."""
    header = stream.read(_LENGTH.size)
    if header is None or len(header) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(header)
    payload = stream.read(size) if size else b""
    return payload if payload is not None and len(payload) == size else None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill a helper, reap it and close the session's ends of its pipes."""
    proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
