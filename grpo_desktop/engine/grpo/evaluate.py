"""Held-out evaluation: greedy answers on problems the run never trains on.

This side evaluation is what tells real progress from reward hacking: the training reward can rise
while held-out accuracy does not. Used by the trainer (at the start, every eval_every steps and at
the end) and by `grpo-desktop eval` (engine/variants/eval_target.py). `sampled_format_rate` is the
format rate of answers sampled at a temperature (1 by default): how often the model follows the
format when it explores, which greedy decoding hides.

Try it:  grpo-desktop train --demo --out runs/demo && grpo-desktop eval runs/demo
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.data.dataset import Example, prompt_for, responses
from grpo_desktop.engine.events import EvalResult
from grpo_desktop.engine.rewards.functions import format_reward
from grpo_desktop.engine.rewards.task_score import accuracy_verdicts_for
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

EVAL_BATCH = 64  # problems decoded together on a GPU (each batch's cache must fit beside training)
# On the CPU, where 128 rows' cache is small beside the host's memory: a decode step pays its
# per-step overhead once however many rows it holds, so the demo's 100 problems go in one batch,
# ~7 % less CPU time per evaluation than 64 + 36, with the same answers (bench/README.md,
# "decode_floor.py").
EVAL_BATCH_CPU = 128


def _batch_size(policy) -> int:
    device = getattr(policy, "device", None)
    return EVAL_BATCH_CPU if getattr(device, "type", str(device)) == "cpu" else EVAL_BATCH


def _answer_batches(policy, examples: list[Example], cfg: TrainConfig, **sampling):
    """Yield (examples, completions) per batch of problems (EVAL_BATCH, EVAL_BATCH_CPU on the
    CPU): each prompt built as in training and answered once with `sampling` (greedy=True, or
    temperature and top_p); the completions' texts start with the run's answer prefix, as in
    training."""
    size = _batch_size(policy)
    for start in range(0, len(examples), size):
        batch = examples[start : start + size]
        texts = [prompt_for(policy.tokenizer, ex.problem, cfg.data) for ex in batch]
        ids, mask = tokenize_prompts(
            policy.tokenizer, texts, cfg.data.max_prompt_length, policy.device
        )
        with torch.no_grad():
            comps = generate_completions(
                policy.model,
                policy.tokenizer,
                ids,
                mask,
                max_new_tokens=cfg.algorithm.max_completion_length,
                **sampling,
            )
        comps.texts = responses(cfg.data, comps.texts)  # the answer prefix, then the completion
        yield batch, comps


def evaluate(
    policy, examples: list[Example], cfg: TrainConfig, step: int, n_samples: int = 4
) -> EvalResult:
    """Accuracy and format rate of greedy answers to `examples`, scored by the run's accuracy
    settings, with the first `n_samples` answers kept for the log."""
    r = cfg.rewards
    correct = formatted = 0.0
    lengths: list[float] = []
    samples = []
    for batch, comps in _answer_batches(policy, examples, cfg, greedy=True):
        answers = [ex.answer for ex in batch]
        problems = [ex.problem for ex in batch]
        verdicts = accuracy_verdicts_for(cfg.data, r, problems, comps.texts, answers)
        acc = [v.score for v in verdicts]
        fmt = format_reward(comps.texts, think_tag=r.think_tag, answer_tag=r.answer_tag)
        # right answers only: a task's partial credit (countdown's 0.05) is reward, not accuracy
        correct += sum(1.0 for v in acc if v == 1.0)
        formatted += sum(fmt)
        lengths.extend(comps.lengths.tolist())
        for ex, text, ok in zip(batch, comps.texts, acc):
            if len(samples) < n_samples:
                samples.append(
                    {
                        "prompt": ex.problem,
                        "completion": text,
                        "answer": ex.answer,
                        "correct": ok == 1.0,
                    }
                )
    n = len(examples)
    return EvalResult(
        step=step,
        accuracy=correct / max(n, 1),
        format_rate=formatted / max(n, 1),
        n=n,
        mean_length=sum(lengths) / max(len(lengths), 1),
        samples=samples,
    )


def sampled_format_rate(
    policy, examples: list[Example], cfg: TrainConfig, temperature: float = 1.0
) -> float:
    """Share of answers sampled at `temperature` (top-p 1) that follow the think/answer format.
    Seed torch first for a repeatable number."""
    r = cfg.rewards
    formatted = 0.0
    for _batch, comps in _answer_batches(policy, examples, cfg, temperature=temperature, top_p=1.0):
        formatted += sum(format_reward(comps.texts, think_tag=r.think_tag, answer_tag=r.answer_tag))
    return formatted / max(len(examples), 1)
