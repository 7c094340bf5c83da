"""Over-long prompts: found cheaply and warned about, and stored once per group, clipped.

A 5,000,000-character prompt used to be accepted silently, cut to 512 tokens, and repeated in
each of its rows in events.jsonl (160 MB after one step).
"""

from __future__ import annotations

import json
import os

import pytest

from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.data.dataset import build_prompt
from grpo_desktop.engine.grpo.step_report import SHOWN_PROMPT_CHARS, shown_prompt
from grpo_desktop.engine.grpo.trainer import train
from grpo_desktop.engine.models.tiny import build_tokenizer
from grpo_desktop.engine.sampling.rollout import overlong_prompts
from tests.support.toy import toy_config


def _byte_level_bpe():
    """A byte-level BPE like Llama-3's and Qwen's (trained here on a few lines)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    lines = ["What is 12 times 7? Natalia sold clips to 48 of her friends."] * 50
    core.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["<e>"]))
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<e>")


PROBLEMS = [
    "What is 2 × 3?",
    "x" * 200,
    "é" * 150,  # 300 bytes, 150 characters
    "Natalia sold clips to 48 of her friends. " * 10,
    "深" * 90,  # 270 bytes
    "y" * 5000,
]


@pytest.mark.parametrize("make", [build_tokenizer, _byte_level_bpe], ids=["char", "bpe"])
@pytest.mark.parametrize("limit", [64, 180, 256])
def test_overlong_prompts_match_tokenizing_every_prompt(make, limit):
    tok = make()
    system = "Think step by step."
    expected = []
    for i, p in enumerate(PROBLEMS):
        text = build_prompt(tok, p, system)
        n = len(tok(text, add_special_tokens=False)["input_ids"])
        if n > limit:
            expected.append((i, n))
    assert overlong_prompts(tok, PROBLEMS, limit, system) == expected
    assert expected or limit > 64  # the smallest limit cuts some with either tokenizer


def test_huge_prompts_are_stored_clipped_to_their_end():
    assert shown_prompt("short") == "short"
    huge = "a" * 1_000_000 + "THE QUESTION"
    shown = shown_prompt(huge)
    assert shown.endswith("THE QUESTION") and len(shown) < SHOWN_PROMPT_CHARS + 100
    assert shown.startswith("[… 980,012 earlier characters not stored …]")


def test_a_run_warns_about_cut_prompts_and_stores_each_prompt_once(tiny_model_dir, tmp_path):
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    rows[2]["question"] = "Lorem ipsum dolor sit amet. " * 20_000  # 560,000 characters
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    cfg = toy_config(tiny_model_dir, run={"max_steps": 1, "checkpoint_every": 10, "seed": 0})
    cfg = cfg.replace(
        data={"source": "file", "path": str(path), "eval_size": 0, "max_prompt_length": 128},
        algorithm={"prompts_per_step": 8, "num_generations": 2, "max_completion_length": 4},
    )
    run_dir = tmp_path / "run"
    events = list(train(cfg, TrainControl(), run_dir=str(run_dir)))
    assert events[-1].status == "completed", events[-1].message
    warnings = [e.message for e in events if e.type == "log" and "prompt limit" in e.message]
    assert len(warnings) == 1
    assert warnings[0].startswith("1 of 8 training prompts are longer than the prompt limit")
    assert "'Lorem ipsum dolor sit amet. Lorem ipsum…'" in warnings[0]
    assert "Max prompt tokens" in warnings[0]
    rollouts = next(e for e in events if e.type == "rollouts")
    assert len(rollouts.prompts) == 8 and all("prompt" not in r for r in rollouts.rows)
    assert max(len(p) for p in rollouts.prompts) < SHOWN_PROMPT_CHARS + 100
    # One step of 16 rows with a 560,000-character prompt: the log stays small.
    assert os.path.getsize(run_dir / "events.jsonl") < 200_000
