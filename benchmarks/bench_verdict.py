"""Reading a judge's verdict from hostile replies: CPU time per reply size (issue: quadratic in `{`).

    python benchmarks/bench_verdict.py

Each reply is parsed 5 times; the median CPU time is printed. A reply of 200 KiB of `{`
once cost 6 s and 1 MiB minutes; the target is milliseconds, linear in the size.
"""

from __future__ import annotations

import statistics
import time

from pytest_oloproof.evaluators.judges import JudgeReplyError, parse_verdict

VERDICT = '{"verdict": "pass", "rationale": "ok"}'


def replies(size: int) -> dict[str, str]:
    return {
        "braces only": "{" * size,
        "braces, then a verdict": "{" * size + VERDICT,
        "brackets around a verdict": "[" * size + VERDICT + "]",
        "a verdict with a long rationale": '{"verdict": "pass", "rationale": "' + "{" * size + '"}',
        "prose, then a verdict": "lorem ipsum " * (size // 12) + VERDICT,
    }


def cpu_ms(text: str, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        try:
            parse_verdict(text)
        except JudgeReplyError:
            pass
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    for size in (200 * 1024, 1024 * 1024, 4 * 1024 * 1024):
        for name, text in replies(size).items():
            print(f"{size // 1024:>5} KiB  {name:<34} {cpu_ms(text):8.1f} ms")


if __name__ == "__main__":
    main()
