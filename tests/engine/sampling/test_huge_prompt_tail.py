"""A 5 MB prompt costs milliseconds, not a minute (issue 26 §5): the step cuts every prompt to
data.max_prompt_length tokens from its end, so of a prompt far over that only the end is
tokenized (rollout.tail_token_ids), and the start-of-run warning estimates a huge prompt's token
count from its end instead of tokenizing all of it.

The ids must be exactly those of tokenizing the whole text and cutting it, for a character
tokenizer (the demo's kind), a byte-level BPE (Llama-3's and Qwen's kind) and the shipped demo
model's own tokenizer, on text of words, digits, unicode and long runs. Measured on this machine
for the 5,000,000-character prompt, the demo tokenizer: 13 s to tokenize whole (twice a run:
the warning, then every step that draws it), now under 0.1 s; the demo run's step with that
prompt: 46 s before, 9.6 s after (7.0 s with a short prompt instead).
"""

from __future__ import annotations

import time

import pytest
import torch

from grpo_desktop.engine.data.dataset import build_prompt
from grpo_desktop.engine.models.tiny import build_tokenizer
from grpo_desktop.engine.sampling.rollout import (
    overlong_prompts,
    prompt_token_ids,
    tail_token_ids,
    tokenize_prompts,
)
from tests.engine.sampling.test_long_prompts import _byte_level_bpe

SYSTEM = "Think step by step."
HUGE = ("Here is a lot of context. " * 200_000)[:5_000_000] + " What is 2 + 3?"


def _demo_tokenizer():
    from importlib import resources

    from transformers import AutoTokenizer

    folder = resources.files("grpo_desktop") / "resources" / "demo_model"
    return AutoTokenizer.from_pretrained(str(folder))


def _mixed(n: int) -> str:
    words = ["Natalia", "sold", "clips", "to", "48", "of her friends.", "é", "深", "  ", "\n"]
    return " ".join(words[(i * 7 + i // 3) % len(words)] for i in range(n)) + "xxxxxxxxxx" * 300


def _whole_then_cut(tok, text: str, limit: int) -> list[int]:
    """What tokenize_prompts did before: tokenize everything, keep the BOS and the end."""
    row = prompt_token_ids(tok, [text])[0]
    bos = getattr(tok, "bos_token_id", None)
    head = row[:1] if bos is not None and row[:1] == [bos] else []
    return head + row[len(row) - limit + len(head) :] if len(row) > limit else row


@pytest.mark.parametrize("make", [build_tokenizer, _byte_level_bpe, _demo_tokenizer],
                         ids=["char", "bpe", "demo"])  # fmt: skip
@pytest.mark.parametrize("limit", [64, 512])
def test_cutting_from_the_end_gives_the_whole_text_s_tokens(make, limit):
    tok = make()
    for problem in (_mixed(20_000), "y" * 50_000, HUGE[-60_000:], "short"):
        text = build_prompt(tok, problem, SYSTEM)
        ids, mask = tokenize_prompts(tok, [text, "a"], limit, torch.device("cpu"))
        expected = _whole_then_cut(tok, text, limit)
        assert ids[0, mask[0].bool()].tolist() == expected
    assert tail_token_ids(tok, "short", limit) is None  # short texts are tokenized whole


def test_a_5_mb_prompt_is_cut_in_milliseconds_and_counted_without_tokenizing_it_all():
    tok = _demo_tokenizer()
    text = build_prompt(tok, HUGE, SYSTEM)
    t0 = time.perf_counter()
    ids, mask = tokenize_prompts(tok, [text], 512, torch.device("cpu"))
    seconds = time.perf_counter() - t0
    assert int(mask.sum()) == 512
    assert ids[0, mask[0].bool()].tolist() == _whole_then_cut(tok, text[-100_000:], 512)
    assert seconds < 2.0, seconds  # 13 s when all of it was tokenized

    t0 = time.perf_counter()
    cut = overlong_prompts(tok, ["What is 2 + 2?", HUGE], 512, SYSTEM)
    seconds = time.perf_counter() - t0
    assert [i for i, _ in cut] == [1]
    exact = len(text)  # the demo tokenizer has one token per character of this text
    assert abs(cut[0][1] - exact) < exact * 0.01, cut
    assert seconds < 2.0, seconds
