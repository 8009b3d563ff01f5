"""The figures the documentation prints are the program's output: the support_rag walk-through is run through
real subprocesses (run, release policy, gate, plan, diagnose, replays, the budget-120 replay and run, compare) and
every printed block of its README — and the documentation site's copies of them (docs/) — must match it line by
line (ids excepted)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_oloproof.stats import intervals as stats
from pytest_oloproof.store.files import Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "support_rag"
DOCS = ROOT / "docs"


def docs_text() -> str:
    """Every page of the documentation site, one after the other (the copies may move between pages)."""
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md")))


# what the docs may leave out: ids (run_…, sha256:…) and "..." for a path or an elided part of a line
MASKS = re.compile(r"run_(?:[0-9A-Z]{26}|…)|sha256:[0-9a-f]*…?| ?\.\.\.")


def oloproof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_oloproof.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def pattern(line: str) -> re.Pattern[str]:
    parts, pos = [], 0
    for m in MASKS.finditer(line):
        tok = m.group()
        parts.append(re.escape(line[pos : m.start()]))
        parts.append("run_[0-9A-Z]{26}" if tok.startswith("run_") else "sha256:[0-9a-f]{64}" if tok[0] == "s" else ".*")
        pos = m.end()
    parts.append(re.escape(line[pos:]))
    return re.compile("".join(parts))


def blocks(text: str) -> Iterator[list[str]]:
    """Every fenced block of a Markdown text, as its lines."""
    for m in re.finditer(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        yield m.group(1).rstrip("\n").split("\n")


def console_block(text: str, command: str) -> list[str]:
    """The printed lines under ``$ command`` in a console block (the one block that starts with it)."""
    found = [b[1:] for b in blocks(text) if b[0].startswith(f"$ {command}")]
    assert len(found) == 1, f"{len(found)} console blocks start with $ {command}"
    return found[0]


def assert_printed(doc_lines: list[str], out: str) -> None:
    """Each documented line (but a bare "..." line) matches an output line, in the documented order."""
    real = out.splitlines()
    at = 0
    for line in doc_lines:
        if line.strip() == "...":
            continue
        pat = pattern(line)
        for i in range(at, len(real)):
            if pat.fullmatch(real[i]) or (line.endswith(" passed") and pat.search(real[i])):
                at = i + 1
                break
        else:
            raise AssertionError(f"the docs print {line!r}; the program does not (after line {at}):\n{out}")


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The README's commands, in its order, on a fresh copy of the example: their outputs by step."""
    ex = tmp_path_factory.mktemp("docs") / "support_rag"
    shutil.copytree(EXAMPLE, ex, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", ".pytest_cache"))
    out: dict[str, str] = {}

    def step(name: str, code: int, *args: str) -> None:
        r = oloproof(*args, cwd=ex)
        assert r.returncode == code, (name, r.stdout, r.stderr)
        out[name] = r.stdout

    step("run", 1, "run", "-p", "no:cacheprovider")
    first = Store(ex / ".oloproof").run_ids()[0]
    step("release", 3, "run", "-p", "no:cacheprovider", "--oloproof-policy", "release.yaml")
    step("gate", 3, "gate", "latest", "--policy", "release.yaml")
    step("plan", 0, "plan", "latest", "--policy", "release.yaml")
    step("gold", 0, "diagnose", first, "--intervention", "gold-context", "--criterion", "answer_correct")
    diagnosis = re.search(r"^Diagnosis (sha256:[0-9a-f]{64})$", out["gold"], flags=re.M)
    assert diagnosis
    step("inspect", 0, "inspect", diagnosis.group(1)[:13])
    step("topk", 0, "diagnose", first, "--intervention", "top-k", "--top-k", "4", "--criterion", "answer_correct")
    step(
        "reranker", 0, "diagnose", first, "--intervention", "reranker", "--reranker", "app:keyword_reranker",
        "--criterion", "answer_correct",
    )  # fmt: skip
    step(
        "budget_replay", 0, "diagnose", first, "--intervention", "token-budget", "--token-budget", "120",
        "--criterion", "answer_correct",
    )  # fmt: skip
    replay = re.search(r"^Diagnosis (sha256:[0-9a-f]{64})$", out["budget_replay"], flags=re.M)
    assert replay
    step("budget_replay_json", 0, "inspect", replay.group(1), "--json")
    cfg = ex / "oloproof.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("token_budget: 40", "token_budget: 120"), encoding="utf-8")
    step("budget", 1, "run", "-p", "no:cacheprovider")
    step("budget_json", 0, "inspect", Store(ex / ".oloproof").run_ids()[0], "--json")
    step("compare", 3, "compare", "latest", first, "--policy", "compare.yaml")
    comparison = out["compare"].split()[1]
    (ex / "graded.yaml").write_text(
        "decisions:\n  - {name: a, criterion: answer_correct, test: non-inferiority, margin: 5.0}\n"
        "  - {name: n, criterion: ndcg_at_6, test: non-inferiority, margin: 5.0}\n",
        encoding="utf-8",
    )
    step("compare_graded", 3, "compare", "latest", first, "--policy", "graded.yaml")
    step("judges", 1, "run", "-p", "no:cacheprovider", "--oloproof-config", "oloproof-judges.yaml")
    step(
        "validate", 0, "validate-judge", "--config", "oloproof-judges.yaml", "--criterion", "grounded", "--labels",
        "judge_labels.jsonl",
    )  # fmt: skip
    step("plan_comparison", 0, "plan", comparison, "--policy", "compare.yaml")
    return out


def test_the_budget_replay_predicts_the_run_at_that_budget(walk: dict[str, str]) -> None:
    """The replay at 120 tokens (recorded candidates, no retriever call) and the run with token_budget 120 agree
    case by case: the four failures stay failures, as the page's manual experiment found."""
    replay = json.loads(walk["budget_replay_json"])
    run = json.loads(walk["budget_json"])
    assert run["system"]["token_budget"] == 120 and replay["intervention"]["settings"] == {"token_budget": 120}
    verdicts = {c["id"]: c["criteria"]["answer_correct"]["value"] for c in run["cases"]}
    assert {e["id"]: e["replay"]["value"] for e in replay["cases"]} == {i: verdicts[i] for i in replay["selected"]}
    assert sorted(replay["selected"]) == ["money_back", "refund_review", "seat_count", "security_review"]
    assert set(verdicts.values()) == {0.0, 1.0} and sum(v == 0.0 for v in verdicts.values()) == 4


def test_the_example_prints_the_pages_figures(walk: dict[str, str]) -> None:
    lines = walk["run"].splitlines()
    assert "│ recall_at_2     │ 92.3%    │ [63.9%, 99.9%]  │ 12 / 13 observed · 0 missing · 0 excluded    │" in lines
    assert "│ ndcg_at_6       │ 0.866    │ [0.506, 0.990]  │ mean of 13 observed · 0 missing · 0 excluded │" in lines
    compare = walk["compare"].splitlines()
    assert "ndcg_at_6: +0.0 points [-33.6, +33.6] · 13 paired · 0 missing · 0 excluded" in compare
    # the exact paired interval at 13 pairs and no discordant pair is ±24.705, printed outward
    assert "answer_correct: +0.0 points [-24.8, +24.8] · 13 paired · 0 missing · 0 excluded" in compare


@pytest.mark.parametrize(
    ("command", "step"),
    [
        ("oloproof run\n", "run"),
        ("oloproof run --oloproof-policy release.yaml", "release"),
        ("oloproof plan latest --policy release.yaml", "plan"),
        ("oloproof diagnose run_01M8MG77VNVMQ119R2M1V9Z98T --intervention gold-context", "gold"),
        ("oloproof inspect sha256:", "inspect"),
        ("oloproof diagnose run_01M8MG77VNVMQ119R2M1V9Z98T --intervention top-k", "topk"),
        ("oloproof diagnose run_01M8MG77VNVMQ119R2M1V9Z98T --intervention reranker", "reranker"),
        ("oloproof diagnose run_01M8MG77VNVMQ119R2M1V9Z98T --intervention token-budget", "budget_replay"),
        ("sed -i 's/token_budget: 40/token_budget: 120/'", "budget"),
        ("oloproof compare NEW_RUN_ID FIRST_RUN_ID --policy compare.yaml", "compare"),
        ("oloproof run --oloproof-config oloproof-judges.yaml", "judges"),
    ],
)
def test_the_example_readme_prints_what_the_program_prints(walk: dict[str, str], command: str, step: str) -> None:
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    if command.endswith("\n"):  # `$ oloproof run` alone, not a longer command that starts with it
        found = [b[1:] for b in blocks(text) if b[0] == f"$ {command.strip()}"]
        assert len(found) == 1
        doc = found[0]
    else:
        doc = console_block(text, command)
    if step == "budget":
        doc = doc[1:]  # the block's second command, `oloproof run`, prints the rest
    if step == "judges":  # the block's second command validates the judge
        at = next(i for i, x in enumerate(doc) if x.startswith("$ oloproof validate-judge"))
        doc, validate = doc[:at], doc[at + 1 :]
        assert_printed(validate, walk["validate"])
    assert_printed(doc, walk[step])
    if step == "release":  # `gate latest` decides the stored run again: the same decision lines
        assert_printed([x for x in doc if x.startswith(("Decision", "  ", "Gate:"))], walk["gate"])


def test_the_documentation_site_prints_what_the_program_prints(walk: dict[str, str]) -> None:
    text = docs_text()
    tables = [b for b in blocks(text) if b[0].startswith("┌─") and any("ndcg_at_6 " in x for x in b)]
    assert len(tables) >= 2  # the tour and the metrics table
    for table in tables:
        assert_printed(table, walk["run"])
    (decisions,) = [b for b in blocks(text) if b[:2] == ["Gate: BLOCK (exit 3)", "Decisions"] and "answers-not" in b[2]]
    assert_printed(decisions, walk["compare"])
    assert_printed([x for x in decisions if x.startswith("    ")], walk["plan_comparison"])  # `plan` prints them
    (release,) = [b for b in blocks(text) if b[0].startswith("Decision sha256:")]
    assert_printed(release, walk["release"])
    (slices,) = [b for b in blocks(text) if b[0].startswith("Slices (exploratory: estimates")]
    assert_printed(slices, walk["run"])
    (notes,) = [b for b in blocks(text) if b[0].startswith("answer_correct: 13 paired cases cannot")]
    assert_printed(notes, walk["compare_graded"])


def test_the_docs_missing_pair_line_is_the_exact_interval() -> None:
    """Its inline example (9 of 12 candidates pass, every baseline passed, one pair missing) as the exact paired
    interval gives it; the CLI prints the same line in tests/test_release.py."""
    iv = stats.paired_rate_interval(0, 3, 12)
    lo, hi = stats.round_outward(100 * iv.low, 100 * iv.high, 1)
    worst = stats.paired_rate_interval(0, 4, 13).low, stats.paired_rate_interval(1, 3, 13).high
    wlo, whi = stats.round_outward(100 * worst[0], 100 * worst[1], 1)
    line = (
        f"-25.0 points [{lo:+.1f}, {hi:+.1f}] · 12 paired · 1 missing · with missing at worst: [{wlo:+.1f}, {whi:+.1f}]"
    )
    text = " ".join(docs_text().split())
    assert line in text


def test_the_docs_print_thirteen_perfect_scores_as_the_mixture_does() -> None:
    iv = stats.mean_interval([1.0] * 13)
    low, high = stats.round_outward(iv.low, iv.high, 3)
    text = " ".join(docs_text().split())
    assert f"thirteen perfect nDCGs print [{low:.3f}, {high:.3f}]" in text
    assert f"printed [{low:.3f}, {high:.3f}]" in text
