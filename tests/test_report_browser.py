"""The HTML report in a real browser: headless Chromium (the system's, never a downloaded one) via Playwright.

The example's walk-through (run, diagnose, larger budget, compare) is built with the real CLI, its
pages written with `oloproof report --html DIR`, and each page opened from file://. Every test
checks that the page logged no console error and asked for nothing but itself. A screenshot of
each page is kept under the test's tmp folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_rag"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


def chromium_path() -> str | None:
    for candidate in (os.environ.get("OLOPROOF_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _unavailable(reason: str) -> None:
    """No browser: a skip with the reason on a developer's machine, a failure under CI (it must run there)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests must run under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        _unavailable("no Chromium found (install Debian's `chromium` package, or set OLOPROOF_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=path,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@dataclass
class Opened:
    page: Any
    url: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed: list[tuple[str, str | None]] = field(default_factory=list)

    def check_clean(self) -> None:
        assert self.console_errors == []
        assert self.requests == [self.url.split("#")[0]]
        assert self.failed == []


@pytest.fixture
def open_page(chromium: Any, tmp_path: Path) -> Iterator[Any]:
    pages: list[Any] = []

    def opener(path: Path, anchor: str = "") -> Opened:
        page = chromium.new_page()
        pages.append(page)
        url = path.resolve().as_uri() + anchor
        opened = Opened(page, url)
        page.on("console", lambda m: opened.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: opened.console_errors.append(f"pageerror: {e}"))
        page.on("request", lambda r: opened.requests.append(r.url))
        page.on("requestfailed", lambda r: opened.failed.append((r.url, r.failure)))

        def only_the_page(route: Any) -> None:  # anything beyond the page itself is refused and counted
            if route.request.url == url.split("#")[0]:
                route.continue_()
            else:
                route.abort()

        page.route("**/*", only_the_page)
        page.goto(url)
        page.wait_for_selector("body[data-ready='true']", state="attached")
        return opened

    yield opener
    for page in pages:
        page.close()


def shot(opened: Opened, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    opened.page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    return path


# ------------------------------------------------------------------ the example's pages


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@dataclass
class Site:
    root: Path
    run_id: str
    diagnosis: str
    comparison: str
    replay: str
    judged_run: str
    project: Path


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The walk-through of examples/support_rag on a copy, every page written with `oloproof report --html`."""
    work = tmp_path_factory.mktemp("support_rag")
    shutil.copytree(EXAMPLE, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    assert cli(work, "run", "-q", "-p", "no:cacheprovider").returncode == 1
    run_id = json.loads(cli(work, "runs", "--json").stdout)["runs"][0]["run_id"]
    diag = cli(work, "diagnose", run_id, "--criterion", "answer_correct", "--json")
    assert diag.returncode == 0, diag.stderr
    diagnosis = json.loads(diag.stdout)["id"]
    config = work / "oloproof.yaml"
    config.write_text(config.read_text().replace("token_budget: 40", "token_budget: 120"))
    assert cli(work, "run", "-q", "-p", "no:cacheprovider").returncode == 1
    runs = [r for r in json.loads(cli(work, "runs", "--json").stdout)["runs"] if r["purpose"] == "run"]
    comp = cli(work, "compare", runs[0]["run_id"], run_id, "--policy", "compare.yaml", "--json")
    assert comp.returncode == 3, comp.stderr
    comparison = json.loads(comp.stdout)["id"]
    replay = cli(
        work, "diagnose", run_id, "--intervention", "top-k", "--top-k", "4", "--criterion", "answer_correct", "--json"
    )
    assert replay.returncode == 0, replay.stderr
    # the pytest form of the same diagnosis writes its page at session end
    session = cli(
        work,
        "run",
        "-q",
        "-p",
        "no:cacheprovider",
        "--oloproof-diagnose",
        run_id,
        "--oloproof-criterion",
        "answer_correct",
        "--oloproof-html",
        "diagnosis-session.html",
    )
    assert session.returncode in (0, 1), session.stdout + session.stderr
    # the example's judge configuration: a run whose verdicts carry a judge's rationale
    judged = cli(work, "run", "-q", "-p", "no:cacheprovider", "--oloproof-config", "oloproof-judges.yaml")
    assert judged.returncode == 1, judged.stdout + judged.stderr
    judged_id = json.loads(cli(work, "runs", "--json").stdout)["runs"][0]["run_id"]
    site = work / "site"
    proc = cli(work, "report", "--html", str(site))
    assert proc.returncode == 0, proc.stderr
    return Site(site, run_id, diagnosis, comparison, json.loads(replay.stdout)["id"], judged_id, work)


def test_run_page_lists_13_cases_and_filters_to_the_4_failed(
    example_site: Site, open_page: Any, tmp_path: Path
) -> None:
    opened = open_page(example_site.root / f"{example_site.run_id}.html")
    page = opened.page
    assert page.locator("#case-rows tr").count() == 13
    assert page.locator("#count-cases").get_attribute("data-count") == "13"
    assert page.locator("#count-failed").get_attribute("data-count") == "4"
    assert page.locator("#case-rows tr.failed").count() == 4
    # the stage funnel: 13 labelled, 12 retrieved within depth 6, 12 within top-k 2, 10 in the context, 9 passed
    funnel = page.locator("#funnel .fcount").evaluate_all("xs => xs.map(x => x.dataset.count)")
    assert funnel == ["13", "12", "12", "10", "9"]
    assert "−2 dropped by assembly: context budget" in page.locator("#funnel").inner_text()
    # slices: a value short of support says so instead of showing an estimate
    slices = page.locator(".slices").inner_text()
    assert "2 observed · insufficient support" in slices and "90.0% [55.4%, 99.8%] 9/10" in slices
    shot(opened, tmp_path, "run")

    page.locator("#f-failed").check()
    ids = sorted(page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)"))
    assert ids == ["money_back", "refund_review", "seat_count", "security_review"]
    assert page.locator("#shown").get_attribute("data-shown") == "4"

    # by label (from the stored diagnosis), then by slice value and by text, each on top of "failed only"
    page.locator("#f-label").select_option("CONTEXT_ASSEMBLY_LOSS")
    ids = sorted(page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)"))
    assert ids == ["refund_review", "security_review"]
    page.locator("#f-label").select_option("")
    page.locator("#f-slice").select_option(label="metadata.topic=billing (5)")
    assert page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)") == ["money_back"]
    page.locator("#f-reset").click()
    page.locator("#f-search").fill("seat")
    assert page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)") == ["seat_count"]
    page.locator("#f-search").fill("")
    assert page.locator("#case-rows tr").count() == 13

    # by criterion outcome, and sorting by a column
    page.locator("#f-criterion").select_option(label="hit_rate_at_2")
    page.locator("#f-outcome").select_option("fail")
    assert page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)") == ["money_back"]
    page.locator("#f-criterion").select_option("")
    page.locator("#case-head th[data-key='id'] button").click()
    ids = page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)")
    assert ids == sorted(ids) and len(ids) == 13
    page.locator("#case-head th[data-key='id'] button").press("Enter")  # keyboard: the same button
    ids = page.locator("#case-rows tr").evaluate_all("rows => rows.map(r => r.dataset.case)")
    assert ids == sorted(ids, reverse=True)
    assert page.locator("#case-head th[data-key='id']").get_attribute("aria-sort") == "descending"
    opened.check_clean()


def test_refund_review_ladder_shows_the_relevant_passage_dropped_by_the_budget(
    example_site: Site, open_page: Any, tmp_path: Path
) -> None:
    opened = open_page(example_site.root / f"{example_site.run_id}.html", "#case=refund_review")
    page = opened.page
    detail = page.locator("#detail")
    assert detail.is_visible()
    assert page.locator("#detail-h").inner_text() == "Case refund_review"
    second = page.locator("#ladder tr[data-position='2']")
    assert "relevant" in (second.get_attribute("class") or "")
    assert second.locator("td.relevance").inner_text() == "relevant (grade 1)"
    assert second.locator("td.state").inner_text() == "dropped by token budget"
    assert page.locator("#ladder tr[data-position='1'] td.state").inner_text() == "in context"
    assert page.locator("#ladder tr[data-position='3'] td.state").inner_text() == "below top-k"
    rows = page.locator("#ladder tbody tr").evaluate_all("rs => rs.map(r => r.className)")
    assert rows.index("cut") == 2  # the top-k cut line right after position 2
    assert "two business days" in page.locator("#detail-body").inner_text()
    detail.screenshot(path=str(tmp_path / "refund_review.png"))

    # keyboard: Escape closes the detail; a row's link opens another case through the same anchor.
    # Both go through the hash, and a hashchange event is queued, not dispatched inside the key press:
    # wait for the page to react (a retrying assertion) instead of reading it at once.
    from playwright.sync_api import expect

    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()
    page.locator("#case-rows a[href='#case=seat_count']").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-h")).to_have_text("Case seat_count")
    assert page.evaluate("location.hash") == "#case=seat_count"
    opened.check_clean()


def test_diagnosis_page_shows_the_labels(example_site: Site, open_page: Any, tmp_path: Path) -> None:
    from pytest_oloproof.report.model import page_name

    opened = open_page(example_site.root / page_name("diagnosis", example_site.diagnosis))
    page = opened.page
    count = {
        label: page.locator(f"#label-counts li[data-label='{label}'] .lcount").get_attribute("data-count")
        for label in ("RETRIEVAL_MISS", "CONTEXT_ASSEMBLY_LOSS", "GENERATION_FAILURE", "RANKED_OUT")
    }
    assert count == {"RETRIEVAL_MISS": "1", "CONTEXT_ASSEMBLY_LOSS": "2", "GENERATION_FAILURE": "1", "RANKED_OUT": "0"}
    assert page.locator("#control").inner_text() == "Control: 0 of 4 passed when re-executed without the intervention"
    text = page.locator("main").inner_text()
    assert "Implicated: context budget, in 2 of the 3 recovered failures." in text
    assert "This is a hypothesis to test, not an established cause." in text
    row = page.locator("#diagnosis-cases tr[data-case='seat_count'] td.verdict").all_inner_texts()
    assert row == ["fail", "fail", "fail"]
    # its child runs link to their pages beside it
    hrefs = page.locator("a[href^='run_']").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert all((example_site.root / h.split("#")[0]).is_file() for h in hrefs) and len(hrefs) >= 3
    shot(opened, tmp_path, "diagnosis")
    opened.check_clean()


def test_replay_diagnosis_puts_five_verdicts_side_by_side(example_site: Site, open_page: Any, tmp_path: Path) -> None:
    from pytest_oloproof.report.model import page_name

    opened = open_page(example_site.root / page_name("diagnosis", example_site.replay))
    page = opened.page
    heads = page.locator("#diagnosis-cases thead th").all_inner_texts()
    assert heads[-5:] == ["original", "control", "gold context", "top-k 4", "replay control"]
    cells = page.locator("#diagnosis-cases tr[data-case='refund_review'] td.verdict").all_inner_texts()
    assert cells == ["fail", "fail", "pass", "fail", "fail"]
    assert "Recovered under top-k 4: 0 of 4" in page.locator("main").inner_text()
    assert "Confirmed under top-k 4: 0 of 0 RANKED_OUT cases also recovered" in page.locator("main").inner_text()
    opened.check_clean()


def test_a_diagnosis_session_writes_its_page(example_site: Site, open_page: Any) -> None:
    opened = open_page(example_site.project / "diagnosis-session.html")
    counts = opened.page.locator("#label-counts .lcount").evaluate_all("xs => xs.map(x => x.dataset.count)")
    assert counts == ["1", "0", "2", "0", "0", "1"]  # RETRIEVAL_MISS … GENERATION_FAILURE, in the terminal's order
    opened.check_clean()


def test_judge_rationales_show_in_the_case_detail(example_site: Site, open_page: Any) -> None:
    opened = open_page(example_site.root / f"{example_site.judged_run}.html", "#case=refund_review")
    row = opened.page.locator("#detail table.criteria tr[data-criterion='grounded']")
    assert "Judge rationale: every sentence of the answer appears in the context" in row.inner_text()
    opened.check_clean()


def test_comparison_page_shows_block(example_site: Site, open_page: Any, tmp_path: Path) -> None:
    from pytest_oloproof.report.model import page_name

    opened = open_page(example_site.root / page_name("comparison", example_site.comparison))
    page = opened.page
    assert page.locator(".gate").get_attribute("data-gate") == "BLOCK"
    assert page.locator(".gate").inner_text() == "Gate: BLOCK (exit 3)"
    decisions = page.locator("table.decisions tbody tr:not(.plan)").all_inner_texts()
    assert len(decisions) == 2 and all(
        "INSUFFICIENT_EVIDENCE" in d and "interval_overlaps_margin" in d for d in decisions
    )
    plans = page.locator("table.decisions tbody tr.plan").all_inner_texts()  # one under each undecided decision
    assert len(plans) == 2 and all("would decide it, if the next pairs go like these" in p for p in plans)
    assert page.locator("svg.forest line.margin").count() == 2  # the two decisions' margins
    assert "about 72 would be needed with no changed verdicts" in page.locator("main").inner_text()
    shot(opened, tmp_path, "comparison")
    opened.check_clean()


def test_index_lists_runs_newest_first_and_links_their_pages(
    example_site: Site, open_page: Any, tmp_path: Path
) -> None:
    opened = open_page(example_site.root / "index.html")
    page = opened.page
    hrefs = page.locator("#runs tbody a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    runs = json.loads(cli(example_site.project, "runs", "--json").stdout)["runs"]
    assert hrefs == [f"{r['run_id']}.html" for r in runs] and hrefs == sorted(hrefs, reverse=True)
    assert all((example_site.root / h).is_file() for h in hrefs)
    assert "answer_correct 69.2%" in page.locator("#runs").inner_text()
    shot(opened, tmp_path, "index")
    opened.check_clean()


def test_dark_mode_and_print_keep_the_page_readable(example_site: Site, open_page: Any, tmp_path: Path) -> None:
    opened = open_page(example_site.root / f"{example_site.run_id}.html")
    page = opened.page
    page.emulate_media(color_scheme="dark")
    colors = page.evaluate("() => { const s = getComputedStyle(document.body); return [s.backgroundColor, s.color]; }")
    assert colors == ["rgb(20, 23, 28)", "rgb(228, 231, 236)"]
    shot(opened, tmp_path, "run-dark")
    page.emulate_media(media="print", color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(255, 255, 255)"
    assert page.locator("#filters").is_hidden()
    opened.check_clean()


# ------------------------------------------------------------------ hostile strings


XSS_APP = """
from pytest_oloproof import Passage, Retrieval, rag_system

XSS = {xss!r}


@rag_system(name="xss", version="1", depth=3, top_k=2, token_budget=100)
class Hostile:
    def retrieve(self, input, depth):
        if input["q"] == "raise":
            raise ValueError("retriever broke: " + XSS)
        return Retrieval(query=input["q"], depth=depth, candidates=(
            Passage(doc_id=XSS, score=2.0, text="passage " + XSS),
            Passage(doc_id="plain", score=1.0, text="plain passage"),
        ))

    def generate(self, input, context):
        return {{"answer": "answer " + XSS, "citations": [XSS]}}

    def count_tokens(self, passage):
        return 5
"""


def test_hostile_strings_render_as_text(tmp_path: Path, open_page: Any) -> None:
    project = tmp_path / "xss"
    project.mkdir()
    (project / "xss_app.py").write_text(XSS_APP.format(xss=XSS))
    (project / "oloproof.yaml").write_text(
        "system:\n  name: xss\n  rag: {object: 'xss_app:Hostile'}\ncases: cases.jsonl\n"
        "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n"
        "  - {type: hit_rate, k: 2}\nslices: [metadata.tag]\nmin_slice_support: 1\n"
    )
    (project / "pytest.ini").write_text("[pytest]\n")
    case = {
        "id": "hostile",
        "input": {"q": "q " + XSS},
        "expected": {"answer": "answer", "relevant": [{"doc_id": XSS}]},
        "metadata": {"tag": XSS},
    }
    broken = {"id": "broken", "input": {"q": "raise"}, "expected": {"answer": "answer"}}
    (project / "cases.jsonl").write_text(json.dumps(case) + "\n" + json.dumps(broken) + "\n")
    assert cli(project, "run", "-q", "-p", "no:cacheprovider").returncode == 1
    run_id = json.loads(cli(project, "runs", "--json").stdout)["runs"][0]["run_id"]
    out = tmp_path / "xss.html"
    assert cli(project, "report", run_id, "--html", str(out)).returncode == 0

    opened = open_page(out, "#case=hostile")
    page = opened.page
    assert page.evaluate("window.__xss") is None  # no script ran, no handler fired
    assert page.locator("img").count() == 0 and page.locator("script").count() == 2  # the page's own two
    assert XSS in page.locator("#ladder tr[data-position='1']").inner_text()
    assert page.locator("#ladder tr[data-position='1'] td.relevance").inner_text() == "relevant (grade 1)"
    assert f"answer {XSS}" in page.locator("#detail-body").inner_text()
    assert page.locator("#f-slice option").all_inner_texts()[1] == f"metadata.tag={XSS} (1)"
    assert XSS in page.locator("svg.forest").first.inner_html().replace("&lt;", "<").replace("&gt;", ">") or (
        XSS in page.locator("#slices-h ~ div").inner_text()
    )
    shot(opened, tmp_path, "xss")
    page.locator("#f-search").fill("<script>")
    assert page.locator("#case-rows tr").count() == 1

    # a system error: the detail shows the stage, the message and the user's traceback, as text
    page.evaluate("location.hash = '#case=broken'")
    from playwright.sync_api import expect

    expect(page.locator("#detail-h")).to_have_text("Case broken")  # the hashchange is handled asynchronously
    body = page.locator("#detail-body").inner_text()
    assert f"retrieve: ValueError — retrieve() raised ValueError: retriever broke: {XSS}" in body
    assert 'in retrieve\n    raise ValueError("retriever broke: " + XSS)' in body
    assert "No retrieval recorded (the system failed)." in body
    assert page.evaluate("window.__xss") is None
    opened.check_clean()
    assert re.search(r"<script>window", out.read_text()) is None


def test_the_content_security_policy_stops_a_string_that_slipped_through(
    example_site: Site, open_page: Any, tmp_path: Path
) -> None:
    """Belt and braces: markup injected into a page (as if escaping had failed) neither loads nor runs."""
    page_path = example_site.root / f"{example_site.run_id}.html"
    html = page_path.read_text(encoding="utf-8")
    slipped = '<img src="https://example.invalid/x.png" onerror="window.__xss = 1"><script>window.__xss = 2</script>'
    bad = tmp_path / "slipped.html"
    bad.write_text(html.replace("<footer", slipped + "<footer", 1), encoding="utf-8")
    opened = open_page(bad)
    assert opened.page.evaluate("window.__xss") is None
    # Chromium reports the image's request, and blocks it before it leaves the browser
    assert opened.requests == [bad.resolve().as_uri(), "https://example.invalid/x.png"]
    assert opened.failed == [("https://example.invalid/x.png", "csp")]
    assert opened.console_errors and all("Content Security Policy" in e for e in opened.console_errors)
    assert opened.page.locator("#case-rows tr").count() == 13  # the page's own script still ran
