"""Try a trained model (engine/variants/try_model.py) on real demo runs: greedy answers as the held-out
evaluation gives them, the base model apart from a checkpoint, streaming, cancel, scoring parts.

The runs are conftest's `trained_run` (the demo model trained for real, a checkpoint a step).
Two steps move the weights too little to change a greedy answer, so a copy of each run has its
newest checkpoint's weights pushed clearly away from the base (`_push_away`: seeded noise on the
LoRA B matrices, or on every full weight): then "the checkpoint answers" and "the base answers"
are told apart by their text, and each must equal what the evaluation path (load_policy +
evaluate) says for that same checkpoint loaded on its own.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from grpo_desktop.engine.data.dataset import Example
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.grpo.evaluate import evaluate
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.models.shapes import SHAPES, build_tokenizer
from grpo_desktop.engine.runs import checkpoint as ckpt
from grpo_desktop.engine.runs.files import read_run_config
from grpo_desktop.engine.variants.run_variants import ModelVariants
from grpo_desktop.engine.variants.try_model import (
    NO_GOLD,
    UNTRUSTED,
    StreamText,
    TrySettings,
    answer_prompt,
    problem_choices,
    run_config,
)


def _push_away(run_dir: str, seed: int = 0) -> str:
    """The newest checkpoint's weights file, changed in place by seeded noise."""
    weights, is_adapter = ckpt.weights_path(ckpt.latest_checkpoint(run_dir))
    name = "adapter_model.safetensors" if is_adapter else "model.safetensors"
    path = os.path.join(weights, name)
    tensors = load_file(path)
    g = torch.Generator().manual_seed(seed)
    for key, t in tensors.items():
        if (is_adapter and "lora_B" in key) or (not is_adapter and t.is_floating_point()):
            scale = 0.3 if is_adapter else 0.3 * float(t.float().std().clamp(min=1e-3))
            tensors[key] = t + scale * torch.randn(t.shape, generator=g).to(t.dtype)
    save_file(tensors, path, metadata={"format": "pt"})
    return weights


@pytest.fixture(scope="module")
def pushed_runs(trained_run, tmp_path_factory):
    """pushed_runs(lora) -> (a copy of the run with its newest checkpoint pushed away, its
    config, ModelVariants on it, the pushed weights folder), made once per module."""
    made: dict[bool, tuple] = {}

    def get(lora: bool = True) -> tuple:
        if lora not in made:
            run_dir = str(tmp_path_factory.mktemp("pushed") / "run")
            shutil.copytree(trained_run(lora=lora), run_dir)
            weights = _push_away(run_dir)
            cfg = read_run_config(run_dir)
            made[lora] = (run_dir, cfg, ModelVariants(cfg, run_dir), weights)
        return made[lora]

    yield get
    for _run_dir, _cfg, mv, _weights in made.values():
        mv.close()


@pytest.fixture(params=[True, False], ids=["lora", "full"])
def pushed(request, pushed_runs):
    return pushed_runs(request.param)


@pytest.fixture
def lora_run(pushed_runs):
    return pushed_runs(True)


def _evaluated(cfg, examples, adapter=None, weights=None) -> list[str]:
    """Greedy completions of the evaluation path, the checkpoint loaded on its own."""
    cfg = cfg.replace(algorithm={"beta": 0.0}, lora={"enabled": adapter is not None})
    policy = load_policy(cfg, adapter, weights)
    result = evaluate(policy, examples, cfg, step=0, n_samples=len(examples))
    return [s["completion"] for s in result.samples]


def test_greedy_answers_are_the_evaluations_and_the_checkpoint_is_not_the_base(pushed):
    run_dir, cfg, mv, weights = pushed
    problems = problem_choices(cfg, "held_out", n=2)
    examples = [Example(p["problem"], p["answer"]) for p in problems]
    is_adapter = mv.find("latest").is_adapter
    trained = _evaluated(cfg, examples, *((weights, None) if is_adapter else (None, weights)))
    base = _evaluated(cfg, examples)
    ours_trained = [answer_prompt(mv, cfg, "latest", e.problem, e.answer) for e in examples]
    ours_base = [answer_prompt(mv, cfg, "base", e.problem, e.answer) for e in examples]
    assert [r["samples"][0]["text"] for r in ours_trained] == trained
    assert [r["samples"][0]["text"] for r in ours_base] == base
    assert trained != base  # the pushed weights answer otherwise: the checkpoint was active
    assert ours_trained[0]["variant"] == mv.variants[-1].key and ours_base[0]["step"] is None
    # and the base is the base again after a checkpoint was used (adapters off, not merged in)
    assert answer_prompt(mv, cfg, "base", examples[0].problem)["samples"][0]["text"] == base[0]


def test_streamed_texts_grow_to_the_answer_and_cancel_stops_unscored(pushed):
    _run_dir, cfg, mv, _weights = pushed
    problem = problem_choices(cfg, "held_out", n=1)[0]
    seen: list[list[str]] = []
    result = answer_prompt(mv, cfg, "base", problem["problem"], on_text=seen.append)
    final = result["samples"][0]["text"]
    assert len(seen) > 5 and seen[-1] == [final]
    assert all(final.startswith(texts[0]) for texts in seen)  # each a prefix of the answer
    # Stop after the third token: three tokens decoded, the answer cut short and not scored.
    calls = []
    stopped = answer_prompt(
        mv, cfg, "latest", problem["problem"], problem["answer"],
        TrySettings(greedy=False, samples=2, seed=0),
        on_text=lambda texts: None,
        should_stop=lambda: calls.append(1) or len(calls) >= 3,
    )  # fmt: skip
    assert stopped["cancelled"] and len(calls) == 3
    assert [s["tokens"] for s in stopped["samples"]] == [3, 3]
    assert {s["ended"] for s in stopped["samples"]} == {"stopped"}
    assert all(s["score"] is None for s in stopped["samples"])
    assert any("not scored" in note for note in stopped["notes"])


def test_sampled_answers_are_several_and_repeatable_with_a_seed(lora_run):
    _run_dir, cfg, mv, _weights = lora_run
    settings = TrySettings(greedy=False, temperature=1.5, samples=3, seed=7, max_new_tokens=12)
    one = answer_prompt(mv, cfg, "latest", "What is 3 + 4?", settings=settings)
    two = answer_prompt(mv, cfg, "latest", "What is 3 + 4?", settings=settings)
    assert len(one["samples"]) == 3 and one["samples"] == two["samples"]
    assert all(s["tokens"] <= 12 for s in one["samples"])
    assert one["settings"]["max_new_tokens"] == 12 and one["settings"]["samples"] == 3


def test_scores_have_the_runs_parts_and_a_typed_prompt_no_accuracy(lora_run):
    _run_dir, cfg, mv, _weights = lora_run
    problem = problem_choices(cfg, "training", n=1)[0]
    picked = answer_prompt(mv, cfg, "base", problem["problem"], problem["answer"])
    score = picked["samples"][0]["score"]
    # The demo's rewards: accuracy (weight 1) and format (weight 0.2), the total weighted so.
    assert set(score["rewards"]) == {"accuracy", "format"}
    acc, fmt = score["rewards"]["accuracy"], score["rewards"]["format"]
    assert acc in (0.0, 1.0) and fmt in (0.0, 1.0)
    assert score["reward"] == pytest.approx(acc + 0.2 * fmt)
    assert picked["gold"] == problem["answer"] and picked["notes"] == []
    # Gold = what the model answered: accuracy 1 whatever it said.
    read = score["extracted"]
    if read is not None:
        again = answer_prompt(mv, cfg, "base", problem["problem"], read)["samples"][0]["score"]
        assert again["rewards"]["accuracy"] == 1.0
    typed = answer_prompt(mv, cfg, "base", problem["problem"])  # no gold
    assert typed["samples"][0]["score"]["rewards"]["accuracy"] is None
    # Accuracy did not score, so the total is unknown (was 0.2 × format: issue 27 §1).
    assert typed["samples"][0]["score"]["reward"] is None
    assert NO_GOLD in typed["notes"] and typed["gold"] is None


def test_a_custom_checker_scores_in_its_process_unless_not_trusted(lora_run):
    _run_dir, cfg, mv, _weights = lora_run
    checker = "def check(completion, answer, prompt):\n    return len(prompt) / 100\n"
    custom = cfg.replace(rewards={"custom_checker": checker, "custom_weight": 1.0})
    prompt = "What is 2 + 2?"  # 14 characters: the checker gives 0.14
    result = answer_prompt(mv, custom, "base", prompt, "4")
    score = result["samples"][0]["score"]
    assert score["rewards"]["custom"] == pytest.approx(0.14) and score["error"] is None
    parts = score["rewards"]
    assert score["reward"] == pytest.approx(parts["accuracy"] + 0.2 * parts["format"] + 0.14)
    untrusted = answer_prompt(mv, custom, "base", prompt, "4", run_checker=False)
    assert "custom" not in untrusted["samples"][0]["score"]["rewards"]
    assert UNTRUSTED in untrusted["notes"]
    broken = custom.replace(rewards={"custom_checker": checker.replace("100", "0")})
    failed = answer_prompt(mv, broken, "base", prompt, "4")["samples"][0]["score"]
    assert failed["rewards"]["custom"] is None and "ZeroDivisionError" in failed["error"]


def test_bad_settings_and_prompts_are_user_errors(lora_run):
    _run_dir, cfg, mv, _weights = lora_run
    with pytest.raises(UserError, match="Temperature must be above 0"):
        answer_prompt(mv, cfg, "base", "hi", settings=TrySettings(greedy=False, temperature=0))
    with pytest.raises(UserError, match="Type a prompt"):
        answer_prompt(mv, cfg, "base", "  ")
    with pytest.raises(UserError, match="no checkpoint '7'"):
        answer_prompt(mv, cfg, "7", "What is 1 + 1?")


def test_an_over_long_prompt_is_cut_as_training_cuts_it(lora_run):
    _run_dir, cfg, mv, _weights = lora_run
    short = cfg.replace(data={"max_prompt_length": 40})
    result = answer_prompt(mv, short, "base", "What is 1 + 1? " * 20, settings=TrySettings(
        max_new_tokens=4))  # fmt: skip
    assert result["prompt_cut"] and result["prompt_tokens"] == 40
    assert "max_prompt_length" in result["notes"][0]


def test_the_run_config_is_the_runs_own_else_the_sessions(lora_run, tmp_path):
    run_dir, cfg, _mv, _weights = lora_run
    fallback = cfg.replace(model={"name_or_path": "elsewhere"})
    assert run_config(run_dir, fallback) == (cfg, True)
    assert run_config(str(tmp_path), fallback) == (fallback, False)
    assert run_config(None, fallback) == (fallback, False)
    held = problem_choices(cfg, "held_out", n=500)
    assert 0 < len(held) <= 500 and {"problem", "answer"} == set(held[0])


def test_stream_text_holds_back_a_character_split_over_byte_tokens():
    # A byte-level BPE tokenizer spells "€" (3 UTF-8 bytes) and "×" (2) with one token per byte
    # here: until the last byte arrives the decoder shows U+FFFD, which must never be shown.
    tok = build_tokenizer(SHAPES["llama-3-base-shaped"])
    text = "7 × 8 = 56 €"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text.split())  # several byte tokens
    stream = StreamText(tok, 1, [tok.eos_token_id])
    shown = []
    for token in ids:
        if stream.add(torch.tensor([token])):
            shown.append(stream.texts[0])
    assert shown[-1] == text
    assert not any("\ufffd" in s for s in shown)
    assert all(text.startswith(s) for s in shown)
    # After its EOS a row takes no more tokens.
    stream.add(torch.tensor([tok.eos_token_id]))
    assert not stream.add(torch.tensor([ids[0]])) and stream.texts[0] == text
