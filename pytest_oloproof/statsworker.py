"""A child process that imports scipy.stats while a long session runs, then computes the run's summary.

Importing scipy.stats takes most of a second, all of it spent at the end of a
session that computes intervals. A session of many cases starts this process
when collection is done; it imports scipy on another core while the cases run,
then waits for one request on stdin (its length, then the slim case summaries
and the summary settings as JSON) and answers with `aggregate.summarize_run` of them, the same
function the session would run itself. Any failure makes the session compute
the summary itself, as it would without a worker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .helperproc import frame, read_frame, spawn, stop


class StatsWorker:
    """The session's side: one request, one answer."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = spawn("statsworker")

    def summarize(
        self, cases: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], timeout_s: float = 600.0
    ) -> dict[str, Any] | None:
        """The summary computed by the worker, or None (the caller then computes it)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            request = orjson.dumps({"cases": cases, "settings": settings}, option=orjson.OPT_NON_STR_KEYS)
            out, _ = proc.communicate(frame(request), timeout=timeout_s)
            if proc.returncode != 0:
                return None
            result: dict[str, Any] = orjson.loads(out)
            return result
        except BaseException as exc:  # an error, a timeout or Ctrl-C: the worker goes, the session goes on
            stop(proc)
            if isinstance(exc, Exception):
                return None
            raise

    def close(self) -> None:
        """Stop a worker that was never asked."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop(proc)


def main() -> int:
    """Import scipy.stats at once, then answer the one request read from stdin."""
    import scipy.stats  # noqa: F401  # the point of this process: imported while the session runs

    from .aggregate import summarize_run

    data = read_frame(sys.stdin.buffer)  # exactly the request: no need to wait for the end of input
    if not data:
        return 1  # the session ended without asking
    request = orjson.loads(data)
    result = summarize_run(request["cases"], request["settings"])
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
