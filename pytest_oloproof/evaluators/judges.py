"""LLM judges: groundedness of an answer and support of its citations.

A judge renders a versioned prompt, asks its provider, and parses a JSON
verdict ``{"verdict": "pass"|"fail", "rationale": "..."}``. A judge that cannot
answer (provider error, timeout, unparseable reply) makes the criterion
*missing* with a ``judge_error: ...`` reason, never a pass or a fail; a reply
holding more than one verdict (or one nested in other JSON) is missing as
``ambiguous_verdict``, never read the convenient way. Judges do
not cache: the engine's judgment cache keys on `settings()`, which holds the
judge type, prompt version and template hash, the answer field and the
provider's identity (never a secret).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pytest_oloproof.errors import ConfigError
from pytest_oloproof.records.redaction import redact
from pytest_oloproof.usage.accounting import BUDGET_EXHAUSTED, BudgetExhausted, judge_call, model_of

from .base import ContextPassage, CriterionValue, EvalInput, Evaluator
from .providers import Messages, Provider, build_provider

JUDGE_SYSTEM_PROMPT = (
    "You are a strict, careful evaluator of retrieval-augmented answers. "
    "Judge only from the passages given. Reply with a single JSON object and nothing else."
)

GROUNDEDNESS_PROMPT_V1 = """\
Decide whether the ANSWER is grounded in the CONTEXT: every factual claim in the \
answer must be stated in, or directly follow from, the context passages. Claims \
that are missing from the context or contradict it make the answer ungrounded. \
An answer that makes no factual claim (for example, it says the information is \
not available) is grounded.

CONTEXT:
{context}

ANSWER:
{answer}

Reply with JSON only: {"verdict": "pass" or "fail", "rationale": "one or two sentences"}
"""

CITATION_SUPPORT_PROMPT_V1 = """\
Decide whether the cited PASSAGE supports the CLAIM it is cited for: the passage \
must state the claim's facts, or they must follow directly from it. A passage that \
is merely on the same topic, or supports only part of the claim, does not support it.

PASSAGE [{doc_id}]:
{passage}

CLAIM:
{claim}

Reply with JSON only: {"verdict": "pass" or "fail", "rationale": "one or two sentences"}
"""

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
#: A verdict key as a model may write it, in JSON or not: "verdict":, 'verdict':, " verdict ": or a bare
#: verdict: (a JS-style object, or "Verdict: fail" in prose), in any case, letters also as JSON \u
#: escapes (which decode to the same key); not part of a longer word, nor escaped inside a JSON string.
_LETTERS = "".join(rf"(?:{c}|\\u00{ord(c):02x}|\\u00{ord(c.upper()):02x})" for c in "verdict")
_VERDICT_KEY = re.compile(rf"""(?<![\w\\])["']?\s*{_LETTERS}\s*["']?\s*:""", re.IGNORECASE)
#: Brackets tried when looking for the object that holds the verdict key, or for one around that object;
#: a reply needing more is refused as ambiguous (it bounds the work at a few passes over the reply).
_TRIES = 16
#: Missing reason of a criterion whose judge replied with more than one verdict, or with one it cannot tell apart.
AMBIGUOUS_VERDICT = "ambiguous_verdict"


class JudgeReplyError(ValueError):
    """The provider answered, but not with a usable verdict."""


class AmbiguousVerdict(JudgeReplyError):
    """The reply holds more than one verdict, or one nested in other JSON: reading either would be a guess."""


def parse_verdict(reply: str) -> tuple[bool, str]:
    """Return (passed, rationale) from a reply holding exactly one JSON verdict object, fenced or in prose.

    Refused as ambiguous (AmbiguousVerdict): a second verdict key anywhere (a draft, a format example,
    a duplicate key, a verdict in another verdict), a verdict object nested in other JSON, or one the
    parser cannot delimit within a bounded number of tries. The work is a few passes over the reply.
    """
    keys = [m.start() for m in itertools.islice(_VERDICT_KEY.finditer(reply), 2)]
    if not keys:
        raise JudgeReplyError("reply is not a JSON verdict: " + repr(_clip(reply, 80)))
    if len(keys) > 1:
        raise AmbiguousVerdict("the reply holds more than one verdict")
    found = _object_holding(reply, keys[0])
    if found is None:
        raise JudgeReplyError("reply is not a JSON verdict: " + repr(_clip(reply, 80)))
    obj, start, end = found
    if _nested_verdict(obj) or _enclosed(reply, start, end):
        raise AmbiguousVerdict("the verdict is nested in other JSON")
    verdict = obj["verdict"]
    if not isinstance(verdict, str) or verdict.strip().lower() not in ("pass", "fail"):
        raise JudgeReplyError(_clip(f"verdict must be 'pass' or 'fail', got {verdict!r}", 120))
    rationale = obj.get("rationale", "")
    if not isinstance(rationale, str):
        rationale = json.dumps(rationale)
    try:
        rationale.encode("utf-8")
    except UnicodeEncodeError as exc:  # a JSON escape such as \ud800 decodes to text no file can hold
        where = f"{exc.object[exc.start : exc.end]!r} at character {exc.start}"
        raise JudgeReplyError(f"the rationale holds a lone surrogate ({where}), which no UTF-8 text can hold") from None
    return verdict.strip().lower() == "pass", rationale.strip()


_DECODER = json.JSONDecoder()


def _decode(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value starting at `start` and where it ends, or None."""
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the interpreter's limit
        return None


def _object_holding(text: str, key_at: int) -> tuple[dict[str, Any], int, int] | None:
    """The JSON object whose own key starts at `key_at`: tried from the nearest `{` before it outwards."""
    limit = key_at
    for _ in range(_TRIES):
        start = text.rfind("{", 0, limit)
        if start < 0:
            return None
        decoded = _decode(text, start)
        limit = start
        if decoded is None or decoded[1] <= key_at:
            continue  # not JSON (a brace in a string, say), or a value that ends before the key
        obj, end = decoded
        if isinstance(obj, dict) and "verdict" in obj:
            return obj, start, end
        raise AmbiguousVerdict("the verdict key is inside other JSON")  # a value around the key, not its object
    raise AmbiguousVerdict("the reply's brackets around the verdict could not be told apart")


def _enclosed(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is a value inside a larger JSON object or array of the reply.

    Only a value preceded by `:`, `,` or `[` and followed by `,`, `}` or `]` can be; then the brackets
    before it are tried, nearest first (at most `_TRIES`), for a value that reaches past its end.
    """
    before, after = text[:start].rstrip()[-1:], text[end:].lstrip()[:1]
    if before not in (":", ",", "[") or after not in (",", "}", "]"):
        return False
    limit = start
    for _ in range(_TRIES):
        opener = max(text.rfind("{", 0, limit), text.rfind("[", 0, limit))
        if opener < 0:
            return False
        decoded = _decode(text, opener)
        limit = opener
        if decoded is not None and decoded[1] >= end:
            return True
    raise AmbiguousVerdict("the reply's brackets around the verdict could not be told apart")


def _nested_verdict(obj: dict[str, Any]) -> bool:
    """Whether a verdict object holds another verdict object at any depth (walked without recursion)."""
    stack: list[Any] = list(obj.values())
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "verdict" in value:
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _clip(text: str, limit: int) -> str:
    """`text` (redacted first, so a secret is never cut into a part the redactor cannot see) cut to `limit`."""
    return redact(text)[:limit]


def _short(exc: BaseException, limit: int = 240) -> str:
    """An error as a missing reason: redacted, then cut to `limit` characters."""
    text = redact(f"{type(exc).__name__}: {exc}" if not isinstance(exc, JudgeReplyError) else str(exc))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render(template: str, **values: str) -> str:
    """Fill `{name}` placeholders in one pass (JSON braces and braces in values stay untouched)."""
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template)


class _LLMJudge(Evaluator):
    """Shared machinery of the LLM judges: provider, prompt, verdict parsing."""

    reads: ClassVar[frozenset[str]] = frozenset({"output", "context"})
    asserts_by_default: ClassVar[bool] = True
    needs_rag: ClassVar[bool] = True
    criterion_name: ClassVar[str] = ""
    default_prompt: ClassVar[str] = ""
    default_prompt_version: ClassVar[str] = ""
    placeholders: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        provider: str | Provider = "openai",
        model: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        object: str | None = None,  # the configuration key is `object`
        timeout_s: float = 30.0,
        retries: int = 3,
        concurrency: int = 4,
        temperature: float = 0.0,
        rate_limit: Mapping[str, float | None] | None = None,
        prompt: str | None = None,
        field: str = "answer",
        base_dir: Path | None = None,
    ) -> None:
        super().__init__(criterion or self.criterion_name, asserts)
        if isinstance(provider, str):
            self.provider: Provider = build_provider(
                {
                    "provider": provider,
                    "model": model,
                    "base_url": base_url,
                    "api_key_env": api_key_env,
                    "object": object,
                    "timeout_s": timeout_s,
                    "retries": retries,
                    "concurrency": concurrency,
                    "temperature": temperature,
                    "rate_limit": rate_limit,
                },
                base_dir,
            )
        else:
            self.provider = provider
        self.field = field
        self.template, self.prompt_version = self._load_prompt(prompt, base_dir)
        self.prompt_sha256 = hashlib.sha256((JUDGE_SYSTEM_PROMPT + "\n\n" + self.template).encode("utf-8")).hexdigest()

    def _load_prompt(self, prompt: str | None, base_dir: Path | None) -> tuple[str, str]:
        """Default template, or the user's text, or the text of a file it names."""
        if prompt is None:
            return self.default_prompt, self.default_prompt_version
        text = prompt
        if "\n" not in prompt and "{" not in prompt:
            path = Path(prompt)
            if not path.is_absolute() and base_dir is not None:
                path = Path(base_dir) / path
            if not path.is_file():
                raise ConfigError(f"{self.type}: prompt file {str(path)!r} not found", key="prompt")
            text = path.read_text(encoding="utf-8")
        absent = [p for p in self.placeholders if "{" + p + "}" not in text]
        if absent:
            raise ConfigError(
                f"{self.type}: custom prompt lacks placeholder(s) " + ", ".join("{" + p + "}" for p in absent),
                key="prompt",
            )
        return text, "custom"

    def settings(self) -> dict[str, Any]:
        """Everything that changes a verdict; never the API key."""
        return {
            "judge": self.type,
            "prompt_version": self.prompt_version,
            "prompt_sha256": self.prompt_sha256,
            "field": self.field,
            "provider": self.provider.identity(),
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.criterion} via {self.provider!r}>"

    @classmethod
    def default_criterion(cls, options: Mapping[str, Any]) -> str:
        return cls.criterion_name

    def with_provider(self, provider: Provider) -> _LLMJudge:
        """The same judge asking another provider (e.g. one a conftest.py fixture supplies)."""
        clone = copy.copy(self)
        clone.provider = provider
        return clone

    def _ask(self, user_prompt: str) -> tuple[bool, str]:
        """One provider call -> (passed, rationale); raises on any failure.

        The call is reserved from the run's budget before it is sent (BudgetExhausted
        when refused) and its reply's usage is recorded (unknown when not reported).
        """
        messages: Messages = [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": user_prompt},
        ]
        with judge_call(self._model()):
            reply = self.provider.complete(messages)
        return parse_verdict(reply)

    def _model(self) -> str | None:
        try:
            return model_of(self.provider.identity())
        except Exception:
            return None

    def _answer(self, output: Any) -> str | None:
        if isinstance(output, str):
            return output
        if isinstance(output, Mapping):
            value = output.get(self.field)
            if isinstance(value, str):
                return value
        return None


def _format_context(context: Sequence[ContextPassage]) -> str:
    if not context:
        return "(no passages)"
    return "\n\n".join(f"[{p.doc_id}{'#' + p.chunk_id if p.chunk_id else ''}] {p.text or ''}" for p in context)


class GroundednessJudge(_LLMJudge):
    """`grounded`: is the answer supported by the context `generate` received?"""

    type: ClassVar[str] = "groundedness_judge"
    criterion_name: ClassVar[str] = "grounded"
    default_prompt: ClassVar[str] = GROUNDEDNESS_PROMPT_V1
    default_prompt_version: ClassVar[str] = "groundedness/1"
    placeholders: ClassVar[tuple[str, ...]] = ("context", "answer")

    def evaluate(self, x: EvalInput) -> CriterionValue:
        """Excluded without a context; missing when the judge fails; else the verdict."""
        if x.context is None:
            return CriterionValue.excluded("no_context")
        answer = self._answer(x.output)
        if answer is None:
            return CriterionValue.missing(f"no_answer: output has no text field {self.field!r}")
        prompt = _render(self.template, context=_format_context(x.context), answer=answer)
        try:
            passed, rationale = self._ask(prompt)
        except BudgetExhausted as exc:
            return CriterionValue.missing(BUDGET_EXHAUSTED, detail={"message": str(exc)})
        except AmbiguousVerdict as exc:
            return CriterionValue.missing(AMBIGUOUS_VERDICT, detail={"message": str(exc)})
        except Exception as exc:
            return CriterionValue.missing(f"judge_error: {_short(exc)}")
        return CriterionValue.observed(
            passed,
            expected="answer grounded in the context",
            actual="grounded" if passed else f"not grounded: {rationale}",
            detail={"rationale": rationale},
        )


def _cited_ids(citations: Any) -> list[str]:
    """Cited doc ids in order, without repeats; items may be ids or {doc_id: ...}."""
    ids: list[str] = []
    for item in citations if isinstance(citations, list | tuple) else []:
        doc_id = item.get("doc_id") if isinstance(item, Mapping) else item
        if doc_id is not None and str(doc_id) not in ids:
            ids.append(str(doc_id))
    return ids


def claim_for(answer: str, doc_id: str) -> str:
    """The sentence(s) of the answer that mention `doc_id` inline, else the whole answer."""
    mention = re.compile(r"(?<![\w-])" + re.escape(doc_id) + r"(?![\w-])")
    sentences = [s for s in _SENTENCE.split(answer.strip()) if s]
    marked = [s for s in sentences if mention.search(s)]
    return " ".join(marked) if marked else answer


class CitationSupportJudge(_LLMJudge):
    """`citations_supported`: does each cited passage support what it is cited for?

    With the simple output shape ``{"answer": str, "citations": [doc_id, ...]}``
    the claim of a citation is the sentence(s) of the answer naming the doc id
    inline (e.g. "... 14 days [kb-01]."), or the whole answer when it has no
    inline markers. Each distinct cited doc id is judged once against the text
    of its context passage(s). The case passes when every citation is
    supported; a cited id absent from the context fails without a call; any
    judge failure makes the case missing. No citations -> excluded.
    """

    type: ClassVar[str] = "citation_support_judge"
    criterion_name: ClassVar[str] = "citations_supported"
    default_prompt: ClassVar[str] = CITATION_SUPPORT_PROMPT_V1
    default_prompt_version: ClassVar[str] = "citation_support/1"
    placeholders: ClassVar[tuple[str, ...]] = ("passage", "claim")

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        citations_field: str = "citations",
        **kwargs: Any,
    ) -> None:
        super().__init__(criterion, asserts, **kwargs)
        self.citations_field = citations_field

    def settings(self) -> dict[str, Any]:
        """Base judge settings plus the citations field."""
        return {**super().settings(), "citations_field": self.citations_field}

    def evaluate(self, x: EvalInput) -> CriterionValue:
        """Judge each cited passage against its claim; all must pass."""
        if x.context is None:
            return CriterionValue.excluded("no_context")
        answer = self._answer(x.output)
        if answer is None:
            return CriterionValue.missing(f"no_answer: output has no text field {self.field!r}")
        raw = x.output.get(self.citations_field) if isinstance(x.output, Mapping) else None
        cited = _cited_ids(raw)
        if not cited:
            return CriterionValue.excluded("no_citations")
        results: list[dict[str, Any]] = []
        for doc_id in cited:
            passages = [p for p in x.context if p.doc_id == doc_id]
            if not passages:
                results.append(
                    {"doc_id": doc_id, "verdict": "fail", "rationale": "cited passage is not in the context"}
                )
                continue
            prompt = _render(
                self.template,
                doc_id=doc_id,
                passage="\n\n".join(p.text or "" for p in passages),
                claim=claim_for(answer, doc_id),
            )
            try:
                passed, rationale = self._ask(prompt)
            except BudgetExhausted as exc:
                return CriterionValue.missing(BUDGET_EXHAUSTED, detail={"message": str(exc)})
            except AmbiguousVerdict as exc:
                return CriterionValue.missing(AMBIGUOUS_VERDICT, detail={"message": f"[{doc_id}] {exc}"})
            except Exception as exc:
                return CriterionValue.missing(f"judge_error: {doc_id}: {_short(exc)}")
            results.append({"doc_id": doc_id, "verdict": "pass" if passed else "fail", "rationale": rationale})
        failed = [r for r in results if r["verdict"] == "fail"]
        rationale = "; ".join(f"[{r['doc_id']}] {r['rationale']}" for r in (failed or results))
        return CriterionValue.observed(
            not failed,
            expected="every cited passage supports its claim",
            actual="all supported" if not failed else "unsupported: " + ", ".join(r["doc_id"] for r in failed),
            detail={"rationale": rationale, "citations": results},
        )


JUDGE_TYPES: dict[str, type[_LLMJudge]] = {cls.type: cls for cls in (GroundednessJudge, CitationSupportJudge)}
