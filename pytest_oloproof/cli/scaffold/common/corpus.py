"""The knowledge base of this starter project: eight short help-desk documents, by id.

Replace it with your own documents (or load them from a file); the ids are what
cases.jsonl's `relevant` and `gold_context` labels name.
"""

from __future__ import annotations

import re

CORPUS = {
    "returns": "Items can be returned within 30 days of delivery. Refunds go back to the original payment method.",
    "shipping": "Standard shipping takes 3 to 5 business days. Express shipping arrives the next business day.",
    "warranty": "Every device has a two-year warranty for manufacturing defects. Accidental damage is not covered.",
    "password": "To reset your password, open Settings and choose Reset password. We email you a reset link.",
    "support-hours": "Phone support is open from 9am to 6pm on weekdays. Chat support is open around the clock.",
    "gift-cards": "Gift cards never expire and work on any order. Gift cards cannot be exchanged for cash.",
    "international": "We ship to 40 countries. Customs duties are paid by the recipient on delivery.",
    "loyalty": "Members earn one point per dollar spent. 100 points can be redeemed for a 5 dollar discount.",
}

STOPWORDS = set(
    "a an and are as at be by can do does for from how i if in is it my of on or the to what when with you your".split()
)


def terms(text: str) -> set[str]:
    """Lower-cased content words, a plural 's' removed: what the retriever and generator match on."""
    out = set()
    for word in re.findall(r"[a-z0-9-]+", text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.add(word)
    return out


def best_sentence(question: str, text: str) -> str:
    """The sentence of `text` sharing the most terms with the question (the first on a tie)."""
    q = terms(question)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    return max(sentences, key=lambda s: len(q & terms(s))) if sentences else ""
