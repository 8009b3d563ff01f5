"""Benchmark: the HTML page of a 10,000-case run (targets: at most 15 MB, usable within 3 s in headless Chromium).

    python benchmarks/bench_html.py [--cases 10000] [--depth 6] [--chromium /usr/bin/chromium]

Runs a real `pytest --oloproof --oloproof-html` session over a generated project (every passage
text distinct, so the page's shared text table saves nothing), then opens the page from file://
in the system's headless Chromium and times: navigation start to the table drawn and its
filters wired (the script marks `body[data-ready]`), a text search over every case, and opening one
case's detail through its anchor. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from _project import make_project, run_pytest
from test_report_browser import CHROMIUM_ARGS  # the browser tests' flags: no network, no sandbox, headless


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        make_project(root, args.cases, depth=args.depth, top_k=2)
        page_path = root / "report.html"
        m = run_pytest(root, "--oloproof", "--oloproof-html", str(page_path))
        wall, code, rss = m.wall_s, m.code, m.tree_peak_mib  # the whole process tree
        if code not in (0, 1) or not page_path.is_file():
            raise SystemExit(f"pytest exited {code} without a page")
        size = page_path.stat().st_size
        print(f"{args.cases} cases, depth {args.depth}: session {wall:.1f} s (peak RSS {rss:.0f} MiB)")
        print(f"page size: {size / 1e6:.2f} MB (target <= 15 MB)")
        ready, filt, detail = [], [], []
        with sync_playwright() as p:
            for _ in range(args.rounds):
                ctx = p.chromium.launch_persistent_context(
                    tempfile.mkdtemp(dir=tmp), executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS
                )
                page = ctx.new_page()
                t0 = time.perf_counter()
                page.goto(page_path.as_uri())
                page.wait_for_selector("body[data-ready='true']", state="attached")
                shown = page.locator("#case-rows tr").count()
                t1 = time.perf_counter()
                page.locator("#f-search").fill("c00999")  # ten of the ids
                # (a selector, not wait_for_function: the page's CSP forbids evaluating strings as script)
                page.wait_for_selector("#shown[data-shown='10']", state="attached")
                found = page.locator("#shown").get_attribute("data-shown")
                t2 = time.perf_counter()
                page.evaluate("location.hash = '#case=c009999'")
                page.wait_for_selector("#ladder")
                t3 = time.perf_counter()
                ready.append(t1 - t0)
                filt.append(t2 - t1)
                detail.append(t3 - t2)
                ctx.close()
        print(f"rows drawn at first: {shown}; a text search found {found} cases")
        print(
            f"usable (navigation -> table drawn, filters wired): median {statistics.median(ready):.2f} s, "
            f"best {min(ready):.2f} s, worst {max(ready):.2f} s of {args.rounds} (target <= 3 s)"
        )
        print(
            f"text search over every case: median {statistics.median(filt) * 1000:.0f} ms; "
            f"one case's detail: median {statistics.median(detail) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
