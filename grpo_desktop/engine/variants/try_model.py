"""Try a trained model: answer one prompt with one variant (the base model or a checkpoint).

Behind the app's *Try* tab. `answer_prompt(mv, cfg, variant, problem, gold, settings)` builds the
prompt exactly as training does (the run's system prompt and chat template, cut to
data.max_prompt_length), decodes greedily or by sampling on the variant `ModelVariants.use`
makes active, streams the text as it comes, and scores each answer with the run's rewards (the
same RewardSet as a training step, custom checker included). Greedy decoding with the run's
max_completion_length gives the same answer as the held-out evaluation (engine/grpo/evaluate.py)
for the same problem and variant. `problem_choices(cfg, source)` lists the run's held-out or
training problems to pick from.

Does not load models (variants/run_variants.py), train or write anything.
Try it:  python -m pytest -q tests/engine/variants/test_try_model.py
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from grpo_desktop.engine.config import RewardsConfig, TrainConfig
from grpo_desktop.engine.data.dataset import load_data, prompt_for, responses
from grpo_desktop.engine.errors import UserError
from grpo_desktop.engine.rewards.score_file import SampleRow, score_rows, weights_of
from grpo_desktop.engine.runs.files import config_path, read_run_config
from grpo_desktop.engine.sampling.rollout import (
    generate_completions,
    prompt_token_ids,
    stop_ids,
    tokenize_prompts,
)
from grpo_desktop.engine.variants.eval_target import held_out_examples
from grpo_desktop.engine.variants.run_variants import ModelVariants
from grpo_desktop.engine.variants.trl_config import trl_run_config
from grpo_desktop.engine.variants.trl_models import is_trl_output
from grpo_desktop.engine.variants.variant import Variant

SOURCES = ("held_out", "training")
MAX_PROBLEMS = 200  # problems offered in a picker
MAX_SAMPLES = 16
MAX_NEW_TOKENS = 4096
NO_GOLD = "No gold answer for a typed prompt: accuracy is not scored, so the total is unknown."
UNTRUSTED = "The custom checker has not been trusted, so it was not run (its part is not scored)."
PARTIAL = "\ufffd"  # what a decoder shows for the first bytes of a character still incomplete


@dataclass(frozen=True)
class TrySettings:
    """How to decode. greedy ignores temperature, top_p and samples (one answer)."""

    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    samples: int = 1
    max_new_tokens: int | None = None  # None: the run's algorithm.max_completion_length
    seed: int | None = None  # seeds torch before sampling (repeatable answers), None: not

    def problems(self) -> list[str]:
        """What is wrong with these settings, as messages for the user."""
        out = []
        if not self.greedy:
            if not (self.temperature > 0 and math.isfinite(self.temperature)):
                out.append(f"Temperature must be above 0 (got {self.temperature}).")
            if not 0 < self.top_p <= 1:
                out.append(f"Top-p must be above 0 and at most 1 (got {self.top_p}).")
            if not 1 <= self.samples <= MAX_SAMPLES:
                out.append(f"Samples must be 1 to {MAX_SAMPLES} (got {self.samples}).")
        if self.max_new_tokens is not None and not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            out.append(f"Max new tokens must be 1 to {MAX_NEW_TOKENS} (got {self.max_new_tokens}).")
        return out


def run_config(run_dir: str | None, fallback: TrainConfig) -> tuple[TrainConfig, bool]:
    """(the config to try with, whether it is the run's own): the run's config.json when the
    folder has one (its model, prompt and rewards are what was trained), else `fallback` (a
    session that has not trained yet: its current settings, base model only). A TRL output_dir
    gets the config engine/variants/trl_config.py builds for it (its base model, LoRA or not, the
    exported project's settings or `fallback`'s data and rewards)."""
    if is_trl_output(run_dir):
        return trl_run_config(run_dir, fallback).config, True
    if run_dir and os.path.isfile(config_path(run_dir)):
        return read_run_config(run_dir), True
    return fallback, False


def problem_choices(
    cfg: TrainConfig, source: str, n: int = MAX_PROBLEMS, seed: int = 0
) -> list[dict]:
    """Up to `n` problems as {"problem", "answer"}: "held_out" ones (as `grpo-desktop eval`
    draws them with `seed`) or "training" ones (the run's training split, in its order).
    UserError (DataError) when the data cannot be read or has no such split."""
    if source not in SOURCES:
        raise ValueError(f"unknown problem source {source!r}; choose one of {SOURCES}")
    if source == "held_out":
        examples = held_out_examples(cfg, n, seed)
    else:
        examples = load_data(cfg.data, seed=cfg.run.seed).train[:n]
        if not examples:
            raise UserError("This run's data has no training problems to pick from.")
    return [{"problem": ex.problem, "answer": ex.answer} for ex in examples]


class StreamText:
    """Each row's text so far, decoded from its tokens up to and including its first stop id.

    Incremental: each new token decodes only a short window (the tokens since the last text
    shown, with the token before them for context, which keeps a SentencePiece word's leading
    space), so a long answer costs linear time, not quadratic. Text ending in a partial
    character waits for its next byte. The caller's final text is the whole answer decoded."""

    def __init__(self, tokenizer, n: int, stops: list[int]):
        self._tokenizer = tokenizer
        self._ids: list[list[int]] = [[] for _ in range(n)]
        self._prefix = [0] * n  # window start: context already shown
        self._read = [0] * n  # tokens up to here are shown
        self._done = [False] * n
        self._stops = set(stops)
        self.texts = [""] * n

    def add(self, tokens: torch.Tensor) -> bool:
        """Take one step's tokens (N,); True when some row's visible text changed."""
        decode = self._tokenizer.decode
        changed = False
        for i, token in enumerate(tokens.tolist()):
            if self._done[i]:
                continue
            ids = self._ids[i]
            ids.append(int(token))
            self._done[i] = int(token) in self._stops
            start, read = self._prefix[i], self._read[i]
            shown = decode(ids[start:read], skip_special_tokens=True)
            text = decode(ids[start:], skip_special_tokens=True)
            if len(text) > len(shown) and not text.endswith(PARTIAL):
                self.texts[i] += text[len(shown) :]
                self._prefix[i], self._read[i] = read, len(ids)
                changed = True
        return changed


def _rewards(cfg: TrainConfig, run_checker: bool) -> RewardsConfig:
    """The run's reward settings, without the custom checker when it may not run."""
    if not run_checker and cfg.rewards.custom_checker.strip():
        return cfg.replace(rewards={"custom_checker": ""}).rewards
    return cfg.rewards


def _score(
    rewards: RewardsConfig, problem: str, gold: str | None, texts: list[str], data=None
) -> list[dict]:
    """Each text scored as the run scores (`data`: a task run's checker finds the problem)."""
    rows = [SampleRow(i + 1, t, gold or "", problem) for i, t in enumerate(texts)]
    return list(score_rows(rewards, rows, data=data))


def answer_prompt(
    mv: ModelVariants,
    cfg: TrainConfig,
    variant: str | Variant,
    problem: str,
    gold: str | None = None,
    settings: TrySettings | None = None,
    *,
    on_text: Callable[[list[str]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    run_checker: bool = True,
) -> dict:
    """Answer `problem` with `variant` and score the answers, as a plain dict:

        {"variant": "step-40", "label": "Step 40", "step": 40, "problem": "What is 17 × 24?",
         "gold": "408", "prompt_tokens": 31, "prompt_cut": False, "cancelled": False,
         "seconds": 0.8, "notes": [], "weights": {"accuracy": 1.0, "format": 0.2},
         "samples": [{"text": "<think>…", "tokens": 112, "ended": "eos",
                      "score": {"rewards": {"accuracy": 1.0, "format": 1.0}, "reward": 1.2,
                                "extracted": "408", "reasons": {}, "error": None}}]}

    `ended` is "eos" (the model ended its answer), "length" (cut by max_new_tokens) or
    "stopped" (cancelled). `gold`: the reference answer of a picked problem (None or "" for a
    typed prompt: accuracy is then not scored, so the total "reward" is None, and a note says so;
    the format reward and a custom checker still score). A custom checker the caller does not trust
    (`run_checker=False`) is not run, and a note says so.

    Streaming: `on_text(texts)` gets every sample's text so far after each decoded token (a
    character split over two byte tokens appears whole once its last byte arrives).
    `should_stop()` is asked after each token; True ends the decode there: answers cut short
    come back unscored with ended "stopped" (those that had ended already are scored)."""
    settings = settings or TrySettings()
    problems = settings.problems()
    if problems:
        raise UserError(" ".join(problems))
    if not problem.strip():
        raise UserError("Type a prompt or pick a problem first.")
    t0 = time.perf_counter()
    chosen = mv.find(variant)
    tokenizer = mv.tokenizer
    text = prompt_for(tokenizer, problem, cfg.data)
    limit = cfg.data.max_prompt_length
    full_length = len(prompt_token_ids(tokenizer, [text])[0])
    n = 1 if settings.greedy else settings.samples
    ids, mask = tokenize_prompts(tokenizer, [text] * n, limit, mv.device)  # (n, P), (n, P)
    max_new = settings.max_new_tokens or cfg.algorithm.max_completion_length
    cancelled = False
    with mv.use(chosen) as model:
        stream = StreamText(tokenizer, n, stop_ids(model, tokenizer))

        def on_token(_t: int, tokens: torch.Tensor) -> bool:
            nonlocal cancelled
            if stream.add(tokens) and on_text is not None:
                on_text(responses(cfg.data, stream.texts))
            if should_stop is not None and should_stop():
                cancelled = True
                return False
            return True

        if settings.seed is not None:
            torch.manual_seed(settings.seed)
        sampling = (
            {"greedy": True}
            if settings.greedy
            else {"temperature": settings.temperature, "top_p": settings.top_p}
        )
        with torch.no_grad():
            comps = generate_completions(
                model, tokenizer, ids, mask, max_new_tokens=max_new, on_token=on_token, **sampling
            )
    texts = responses(cfg.data, comps.texts)  # the answer prefix, then what the model wrote
    if on_text is not None and texts != responses(cfg.data, stream.texts):
        on_text(texts)
    notes = []
    if full_length > limit:
        notes.append(
            f"The prompt has {full_length} tokens; training cuts prompts to "
            f"{limit} (data.max_prompt_length), so its beginning was left out, as in training."
        )
    lengths = comps.lengths.tolist()
    ended = [
        "eos" if not bool(comps.truncated[i]) else "stopped" if cancelled else "length"
        for i in range(n)
    ]
    scored = [i for i in range(n) if ended[i] != "stopped"]
    if len(scored) < n:
        notes.append("Stopped before the end: an answer cut short is not scored.")
    if scored:
        if not gold and cfg.rewards.accuracy_weight > 0:
            notes.append(NO_GOLD)
        if not run_checker and cfg.rewards.custom_checker.strip() and cfg.rewards.custom_weight > 0:
            notes.append(UNTRUSTED)
    rewards = _rewards(cfg, run_checker)
    found = _score(rewards, problem, gold, [texts[i] for i in scored], cfg.data) if scored else []
    scores: list[dict | None] = [None] * n
    for i, score in zip(scored, found):
        scores[i] = score
    samples = [
        {"text": texts[i], "tokens": int(lengths[i]), "ended": ended[i], "score": scores[i]}
        for i in range(n)
    ]
    return {
        "variant": chosen.key,
        "label": chosen.label,
        "step": chosen.step,
        "problem": problem,
        "gold": gold or None,
        "prompt_tokens": min(full_length, limit),
        "prompt_cut": full_length > limit,
        "settings": asdict(settings) | {"max_new_tokens": max_new},
        "cancelled": cancelled,
        "seconds": round(time.perf_counter() - t0, 3),
        "notes": notes,
        "weights": weights_of(rewards),
        "samples": samples,
    }
