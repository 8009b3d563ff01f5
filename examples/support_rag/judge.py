"""A tiny local judge for the example, so judges can be shown without credentials.

Oloproof calls `grounded(messages)` with the chat messages it would send to an
LLM and expects the same JSON reply an LLM would give. This judge passes an
answer when each of its sentences appears word for word in the context: a
strict, explainable rule, good enough to demonstrate caching and validation.
"""

from __future__ import annotations

import json
import re


def _between(text: str, start: str, end: str) -> str:
    i = text.find(start)
    if i < 0:
        return ""
    i += len(start)
    j = text.find(end, i)
    return text[i:] if j < 0 else text[i:j]


def _norm(text: str) -> str:
    return " ".join(re.sub(r"\[[^\]]*\]", " ", text).lower().split())


def grounded(messages):
    prompt = messages[-1]["content"]
    context = _norm(_between(prompt, "CONTEXT:\n", "\n\nANSWER:\n"))
    answer = _between(prompt, "ANSWER:\n", "\n\nReply with JSON")
    sentences = [_norm(s) for s in re.split(r"(?<=[.!?])\s+", answer) if s.strip()]
    missing = [s for s in sentences if s not in context]
    if missing:
        return json.dumps({"verdict": "fail", "rationale": f"not in the context: {missing[0]!r}"})
    return json.dumps({"verdict": "pass", "rationale": "every sentence of the answer appears in the context"})
