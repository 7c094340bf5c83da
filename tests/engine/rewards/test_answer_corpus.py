"""The strict checker against the hand-graded corpus (tests/fixtures/answer_corpus.jsonl).

Each line is a GSM8K- or MATH-style completion with the gold answer as a dataset gives it and the
verdict a careful human grader gave (see each line's note). The strict checker must agree with
every verdict and reward no hedge; the lenient one (kept for teaching) must reward hedges and
differ from strict on nothing else. bench/answer_corpus.py prints the same comparison per
category, for the old checker and TRL's too.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from grpo_desktop.engine.rewards.functions import accuracy_verdicts
from tests.support.paths import FIXTURES

CORPUS = os.path.join(FIXTURES, "answer_corpus.jsonl")
CATEGORIES = {  # every kind of completion the corpus must cover
    "hedge_or", "hedge_tags", "hedge_boxes", "hedge_list", "hedge_sentences", "self_correction",
    "answer_then_numbers", "units_in_tag", "thousands", "unicode", "untagged_math",
    "fractions_decimals", "intervals", "sets", "percentages", "scientific", "negative",
    "wrong_lookalike", "boxed", "last_number", "tagged", "no_answer", "symbolic", "text_answer",
}  # fmt: skip
# The issue's own examples of hedges the old checker rewarded (gold 18, the right value last).
ISSUE_HEDGES = {"hedge_or-01", "hedge_boxes-01", "hedge_tags-01", "hedge_tags-05", "hedge_list-04"}


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _scores(rows: list[dict], checker: str) -> dict[str, float | None]:
    verdicts = accuracy_verdicts(
        [r["completion"] for r in rows], [r["answer"] for r in rows], checker=checker
    )
    return {r["id"]: v.score for r, v in zip(rows, verdicts)}


def test_corpus_is_well_formed_and_covers_every_category(corpus):
    assert len(corpus) >= 150
    assert len({r["id"] for r in corpus}) == len(corpus)
    for row in corpus:
        assert set(row) == {"id", "category", "completion", "answer", "expected", "note"}, row
        assert row["expected"] in (0, 1) and row["note"].strip(), row["id"]
    counts = Counter(r["category"] for r in corpus)
    assert set(counts) == CATEGORIES
    assert min(counts.values()) >= 3
    hedges = [r for r in corpus if r["category"].startswith("hedge_")]
    assert sum(r["expected"] == 0 for r in hedges) >= 30  # hedges of every kind, graded 0


def test_strict_checker_agrees_with_every_verdict(corpus):
    scores = _scores(corpus, "strict")
    disagreements = [
        f"{r['id']}: expected {r['expected']}, scored {scores[r['id']]} ({r['note']})"
        for r in corpus
        if scores[r["id"]] != r["expected"]
    ]
    assert disagreements == []


def test_strict_checker_rewards_no_hedge(corpus):
    scores = _scores(corpus, "strict")
    rewarded = [
        r["id"] for r in corpus if r["category"].startswith("hedge_") and r["expected"] == 0
        if scores[r["id"]] != 0.0
    ]  # fmt: skip
    assert rewarded == []


def test_lenient_checker_rewards_hedges_and_nothing_else_differs(corpus):
    strict, lenient = _scores(corpus, "strict"), _scores(corpus, "lenient")
    hedges = {r["id"] for r in corpus if r["category"].startswith("hedge_") and r["expected"] == 0}
    rewarded = {i for i in hedges if lenient[i] == 1.0}
    assert rewarded >= ISSUE_HEDGES
    assert len(rewarded) >= len(hedges) // 2  # the others have the right value first
    assert {i for i in strict if strict[i] != lenient[i]} <= hedges
