"""A child process that commits a session's held cache writes, so the session never waits on SQLite.

One long single-process session (`Caches.hold_writes(background=True)`) hands
each group of entries to this process, which commits it in one diskcache
transaction on another core and acknowledges it. Until acknowledged, a group
stays readable from the session's memory; if the child fails or vanishes, the
session commits whatever was not acknowledged itself.

Protocol: parent -> child, one frame (helperproc.frame) per group,
`orjson([seq, [[key, text], ...]])`; child -> parent, one line per frame,
`ok <seq>` or `error <seq> <message>` (the child then exits). An empty frame,
or the end of its input, and the child closes the cache and exits 0.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import orjson

from .helperproc import frame, read_frame, spawn


class BackgroundWriter:
    """The parent's side: sends groups, tracks which are not yet acknowledged."""

    def __init__(self, directory: Path) -> None:
        self.proc = spawn("cachewriter", str(directory))
        self._seq = 0
        self._inflight: dict[int, dict[str, str]] = {}  # seq -> group, sent and not acknowledged
        self._cond = threading.Condition()
        self.error: str | None = None  # set once the child has failed or gone
        self._reader = threading.Thread(target=self._read_acks, name="oloproof-cache-acks", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.error is None

    def lookup(self, full_key: str) -> str | None:
        """An entry sent but not yet acknowledged (the latest group holding it wins)."""
        if not self._inflight:  # the usual case, on every cache lookup
            return None
        for group in reversed(list(self._inflight.values())):
            text = group.get(full_key)
            if text is not None:
                return text
        return None

    def send(self, group: dict[str, str]) -> bool:
        """Hand a group to the child; False (and nothing kept) when the child cannot take it."""
        if not self.alive or self.proc.stdin is None:
            return False
        with self._cond:
            self._seq += 1
            seq = self._seq
            self._inflight[seq] = group
        payload = orjson.dumps([seq, list(group.items())])
        try:
            self.proc.stdin.write(frame(payload))
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:  # the child is gone (BrokenPipeError) or stdin closed
            self._fail(f"the cache writer stopped ({type(exc).__name__}: {exc})")
            with self._cond:
                self._inflight.pop(seq, None)
            return False
        except BaseException:  # Ctrl-C mid-frame: the pipe's framing is lost, so is this writer
            self._fail("the cache writer was stopped by an interruption while taking a group")
            self.proc.kill()  # the group stays in flight: the session takes it back and commits it
            raise
        return True

    def drain(self, timeout_s: float = 120.0) -> list[dict[str, str]]:
        """Wait until every sent group is acknowledged; returns, in order, those that never will be."""
        with self._cond:
            self._cond.wait_for(lambda: not self._inflight or not self.alive, timeout=timeout_s)
            if self._inflight and self.alive:
                self.error = f"the cache writer did not acknowledge within {timeout_s:.0f} s"
            left = [self._inflight[s] for s in sorted(self._inflight)]
            self._inflight.clear()
            return left

    def close(self, timeout_s: float = 30.0) -> None:
        """Tell the child there is no more (an empty frame, then the end of its input); wait for it to finish."""
        try:
            if self.proc.stdin is not None:
                if self.proc.poll() is None:
                    self.proc.stdin.write(frame(b""))
                self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5.0)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()

    def kill(self) -> None:
        """Stop the child at once: an unfinished transaction of its own is rolled back by SQLite."""
        self.proc.kill()
        self.close()

    def _fail(self, message: str) -> None:
        with self._cond:
            if self.error is None:
                self.error = message
            self._cond.notify_all()

    def _read_acks(self) -> None:
        out = self.proc.stdout
        assert out is not None
        for line in out:
            parts = line.decode("utf-8", "replace").rstrip("\n").split(" ", 2)
            if parts[0] == "ok" and len(parts) == 2:
                with self._cond:
                    self._inflight.pop(int(parts[1]), None)
                    self._cond.notify_all()
            else:
                detail = parts[2] if len(parts) == 3 else line.decode("utf-8", "replace")
                self._fail(f"the cache writer failed: {detail}")
        self._fail("the cache writer exited")


# ------------------------------------------------------------------ the child


def main(argv: list[str] | None = None) -> int:
    """Commit every frame read from stdin; acknowledge each on stdout."""
    args = sys.argv[1:] if argv is None else argv
    from .cache import open_diskcache

    cache = open_diskcache(Path(args[0]))
    stdin = sys.stdin.buffer
    acks: IO[bytes] | None = sys.stdout.buffer
    try:
        while True:
            payload = read_frame(stdin)
            if not payload:  # the end: the session said there is no more, closed our input, or died
                return 0  # (mid-frame: that group is not acknowledged, so not relied on)
            seq, entries = orjson.loads(payload)
            try:
                with cache.transact(retry=True):
                    for key, text in entries:
                        cache.set(key, text, retry=True)
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
                acks = _ack(acks, f"error {seq} {message}")
                return 1
            acks = _ack(acks, f"ok {seq}")
    finally:
        cache.close()


def _ack(stream: IO[bytes] | None, line: str) -> IO[bytes] | None:
    """Write one acknowledgement; None once the parent is gone (what it sent is still committed)."""
    if stream is None:
        return None
    try:
        stream.write(line.encode("utf-8") + b"\n")
        stream.flush()
        return stream
    except OSError:  # BrokenPipeError: the parent died; go on until the end of its input
        return None


if __name__ == "__main__":
    sys.exit(main())
