"""One GRPO step: sample B·G completions, score them, compute advantages, update the policy.

`sample_groups` generates and scores G completions for each of B problems; `grpo_step` turns the
rewards into advantages, runs the old and reference log-prob passes it needs, the micro-batched
loss with gradient accumulation and the optimizer step, and returns the step's rollout rows and
TRL-named metrics (docs/grpo.md, "One step", says the same in formulas). Dynamic sampling's
extra rounds are `select_groups`, driven by the loop in trainer.py.

Not here: the loop over steps, evaluation, checkpoints (trainer.py), the math (loss.py) and the
step's rollout rows and metrics as the GUI and events.jsonl get them (step_report.py). The
time of each phase comes back in the metrics as `time/generate`, `time/rewards`, `time/ref` (old
and reference log-probs), `time/update` (the policy's forward and backward) and `time/optimizer`.

Try it:  python -m pytest -q tests/engine/grpo/test_step.py
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.data.dataset import Example, prompt_for, responses
from grpo_desktop.engine.estimate.micro_batch import RowsPerPass, halving_on_oom
from grpo_desktop.engine.grpo.loss import compute_advantages, policy_loss
from grpo_desktop.engine.grpo.step_report import rollout_rows, shown_prompt, step_metrics
from grpo_desktop.engine.grpo.update_threads import UpdateThreads, pass_work
from grpo_desktop.engine.ops.lora_product import fused_lora
from grpo_desktop.engine.rewards.functions import RewardBatch, RewardSet
from grpo_desktop.engine.sampling import precision as sampling_precision
from grpo_desktop.engine.sampling.rollout import (
    Completions,
    generate_completions,
    token_logps,
    tokenize_prompts,
)


@dataclass
class Timings:
    """Seconds spent in each phase of a step; `metrics()` gives them their TRL-style names."""

    generate: float = 0.0  # sampling the completions
    rewards: float = 0.0  # scoring them (the custom checker's process included)
    ref: float = 0.0  # the no-gradient passes: old and reference log-probs
    optimizer: float = 0.0  # gradient clipping and the optimizer step
    update: float = 0.0  # the policy's forward and backward passes

    def metrics(self) -> dict[str, float]:
        return {
            "time/generate": self.generate,
            "time/rewards": self.rewards,
            "time/ref": self.ref,
            "time/optimizer": self.optimizer,
            "time/update": self.update,
        }

    @staticmethod
    def total(parts: list[Timings]) -> Timings:
        """The phases summed over several sampling rounds."""
        return Timings(
            generate=sum(t.generate for t in parts),
            rewards=sum(t.rewards for t in parts),
            ref=sum(t.ref for t in parts),
            optimizer=sum(t.optimizer for t in parts),
            update=sum(t.update for t in parts),
        )


@dataclass
class Groups:
    """Completions of several prompts, G per prompt, contiguous per group."""

    examples: list[Example]
    completions: Completions
    rewards: RewardBatch
    totals: torch.Tensor  # (N,) weighted reward, NaN where a part did not score
    timings: Timings = field(default_factory=Timings)


@dataclass
class StepOutput:
    rows: list[dict]
    metrics: dict[str, float]
    advantages: list[float]  # of the scored rows only (unscored rows carry no advantage)
    prompts: list[str] = field(default_factory=list)  # each group's prompt, once
    notes: list[str] = field(default_factory=list)  # for the run's log (a halved micro-batch)


def sample_groups(policy, examples: list[Example], cfg: TrainConfig, rewards: RewardSet) -> Groups:
    a = cfg.algorithm
    G = a.num_generations
    texts = [prompt_for(policy.tokenizer, ex.problem, cfg.data) for ex in examples]
    prompt_ids, prompt_mask = tokenize_prompts(
        policy.tokenizer, texts, cfg.data.max_prompt_length, policy.device
    )  # (B, P)
    t0 = time.perf_counter()
    # All B*G completions in one batched decode: a group's G rows are contiguous, which is the
    # layout compute_advantages groups by.
    comps = generate_completions(
        policy.model,
        policy.tokenizer,
        prompt_ids.repeat_interleave(G, dim=0),  # (B*G, P)
        prompt_mask.repeat_interleave(G, dim=0),  # (B*G, P)
        max_new_tokens=a.max_completion_length,
        temperature=a.temperature,
        top_p=a.top_p,
        min_new_tokens=a.min_completion_length,
        with_entropy=True,  # the step's entropy metric, without a pass over every row for it
        decode_dtype=sampling_precision.for_policy(policy, cfg.model.sampling_precision),
    )
    t1 = time.perf_counter()
    problems = [ex.problem for ex in examples for _ in range(G)]
    answers = [ex.answer for ex in examples for _ in range(G)]
    # With an answer prefix, the answer is the prefix and then the completion: scored, shown in
    # the rollout inspector and opened in the Lab as one text.
    comps.texts = responses(cfg.data, comps.texts)
    scored = rewards.score(problems, comps.texts, answers)
    totals = torch.tensor(
        [math.nan if v is None else float(v) for v in scored.totals], dtype=torch.float64
    )  # (N,) float64: a reward of 1e6 + 0.1 keeps its 0.1
    timings = Timings(generate=t1 - t0, rewards=time.perf_counter() - t1)
    return Groups(examples, comps, scored, totals, timings)


def _pad_cat(tensors: list[torch.Tensor], value: float, left: bool) -> torch.Tensor:
    width = max(t.size(1) for t in tensors)
    out = []
    for t in tensors:
        pad = (width - t.size(1), 0) if left else (0, width - t.size(1))
        out.append(torch.nn.functional.pad(t, pad, value=value))
    return torch.cat(out)


def select_groups(parts: list[Groups], keep: list[torch.Tensor], G: int, pad_id: int) -> Groups:
    """Concatenate the kept groups of several sampling rounds into one Groups."""
    examples, idx_rows = [], []
    for part, kept in zip(parts, keep):
        for g in torch.nonzero(kept).flatten().tolist():
            examples.append(part.examples[g])
        rows = torch.nonzero(kept.repeat_interleave(G)).flatten()
        idx_rows.append(rows)

    # Rounds decode to different lengths: prompts stay left-padded (their ends line up with the
    # completions), completions right-padded, so every row reads as it was sampled.
    def cat(attr, value, left):
        return _pad_cat(
            [getattr(p.completions, attr)[r] for p, r in zip(parts, idx_rows)], value, left
        )

    texts = [p.completions.texts[i] for p, r in zip(parts, idx_rows) for i in r.tolist()]
    with_entropy = all(p.completions.entropy is not None for p in parts)
    comps = Completions(
        cat("prompt_ids", pad_id, True),
        cat("prompt_mask", 0, True),
        cat("completion_ids", pad_id, False),
        cat("completion_mask", 0, False),
        torch.cat([p.completions.truncated[r] for p, r in zip(parts, idx_rows)]),
        texts,
        cat("entropy", 0, False) if with_entropy else None,
    )
    names = parts[0].rewards.names
    pick = [(p, r.tolist()) for p, r in zip(parts, idx_rows)]
    batch = RewardBatch(
        names=names,
        values={n: [p.rewards.values[n][i] for p, rr in pick for i in rr] for n in names},
        totals=[p.rewards.totals[i] for p, rr in pick for i in rr],
        errors=[p.rewards.errors[i] for p, rr in pick for i in rr],
        extracted=_pick(pick, "extracted"),
        reasons=_pick(pick, "reasons"),
    )
    totals = torch.cat([p.totals[r] for p, r in zip(parts, idx_rows)])  # (N,)
    # Every round's sampling time counts: the step paid for the dropped groups too.
    return Groups(examples, comps, batch, totals, Timings.total([p.timings for p in parts]))


def _pick(pick: list, attr: str) -> list:
    """The kept rows' entries of an optional per-row RewardBatch list (empty when unset)."""
    if any(len(getattr(p.rewards, attr)) < len(p.rewards.totals) for p, _ in pick):
        return []
    return [getattr(p.rewards, attr)[i] for p, rr in pick for i in rr]


def _optimizer_update(
    policy, optimizer, scheduler, max_grad_norm: float, timings: Timings
) -> float:
    t0 = time.perf_counter()
    params = policy.trainable_parameters()
    limit = max_grad_norm if max_grad_norm > 0 else math.inf  # inf: measure the norm, clip nothing
    grad_norm = torch.nn.utils.clip_grad_norm_(params, limit)
    optimizer.step()
    # The schedule counts optimizer updates, not steps: with num_iterations > 1 it advances that
    # many times per step.
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    grad_norm = float(grad_norm)  # a sync: the optimizer's work is done when this returns
    timings.optimizer += time.perf_counter() - t0
    return grad_norm


def _used_columns(prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> tuple[int, int]:
    """(first prompt column any row uses, completion columns up to the longest row's end) of
    left-padded prompts (K, P) and right-padded completions (K, C); (P - 1, 1) for no rows."""
    used = torch.nonzero(prompt_mask.sum(dim=0)).flatten()
    first = int(used[0]) if used.numel() else prompt_mask.size(1) - 1
    rows = completion_mask.size(0)
    width = max(1, int(completion_mask.sum(dim=1).max())) if rows else 1
    return first, width


@dataclass
class _Batch:
    """The step's N rows as the log-prob passes and the loss read them, a slice at a time."""

    completions: Completions  # prompt_ids, prompt_mask (N, P); completion_ids, _mask (N, C)
    temperature: float  # log-probs of logits / temperature: the distribution that sampled
    advantages: torch.Tensor  # (N,)
    mask: torch.Tensor  # (N, C) the loss's mask (truncated rows zeroed if asked)
    old_logps: torch.Tensor | None = None  # (N, C), None: one update, the ratio is exactly 1
    ref_logps: torch.Tensor | None = None  # (N, C), None: β = 0, no KL term
    step_rows: int = 0  # the step's rows when this batch holds only some of them (0: all)
    step_tokens: torch.Tensor | None = None  # () the step's loss tokens then (dapo's divisor)
    with_entropy: bool = True  # whether the first pass measures the entropy

    @property
    def N(self) -> int:
        return self.completions.completion_ids.size(0)

    def rows(self, index: torch.Tensor) -> _Batch:
        """The rows `index` (K,) alone, with the padding no kept row needs cut off (columns of
        prompt padding on the left, of completion padding on the right: the kept rows' tokens,
        positions and attention are unchanged). The step's row and token counts stay this
        batch's, for the loss's divisors."""
        c = self.completions
        prompt_mask = c.prompt_mask[index]  # (K, P)
        completion_mask = c.completion_mask[index]  # (K, C)
        first, width = _used_columns(prompt_mask, completion_mask)
        comps = Completions(
            c.prompt_ids[index, first:],  # (K, P')
            prompt_mask[:, first:],  # (K, P')
            c.completion_ids[index, :width],  # (K, C')
            completion_mask[:, :width],  # (K, C')
            c.truncated[index],  # (K,)
            [c.texts[i] for i in index.tolist()],
            None if c.entropy is None else c.entropy[index, :width],  # (K, C')
        )
        pick = lambda t: None if t is None else t[index, :width]  # noqa: E731
        return _Batch(
            comps,
            self.temperature,
            self.advantages[index],  # (K,)
            self.mask[index, :width],  # (K, C')
            pick(self.old_logps),
            pick(self.ref_logps),
            step_rows=self.step_rows or self.N,
            step_tokens=self.mask.sum() if self.step_tokens is None else self.step_tokens,
            with_entropy=self.with_entropy,
        )

    def token_logps(self, model, s: slice, with_entropy: bool = False):
        """Log-probs of rows `s` under `model`, and their entropies when asked: (mb, C) each.

        The pass reads only the columns these rows use: prompt padding that all of them have on
        the left and completion padding that all of them have on the right are cut off first
        (a micro-batch whose answers all ended early pays for its own length, not the step's
        longest), and the results are padded back to C with zeros (the log-probs of masked
        tokens). Causal attention never reads a later column and positions follow the mask, so
        every kept token's log-prob is the one the whole width gives."""
        c = self.completions
        prompt_mask, completion_mask = c.prompt_mask[s], c.completion_mask[s]  # (mb, P), (mb, C)
        C = completion_mask.size(1)
        first, width = _used_columns(prompt_mask, completion_mask)
        logps, entropy = token_logps(
            model,
            c.prompt_ids[s, first:],  # (mb, P')
            prompt_mask[:, first:],  # (mb, P')
            c.completion_ids[s, :width],  # (mb, C')
            completion_mask[:, :width],  # (mb, C')
            self.temperature,
            with_entropy=with_entropy,
        )  # (mb, C') each
        if width < C:
            logps = torch.nn.functional.pad(logps, (0, C - width))  # (mb, C)
            if entropy is not None:
                entropy = torch.nn.functional.pad(entropy, (0, C - width))  # (mb, C)
        return logps, entropy


@dataclass
class _PassTotals:
    """What the first update pass over the N rows measured, for the step's metrics."""

    loss: float = 0.0  # the accumulated loss: the whole step's, as its gradient is
    metrics: dict[str, float] = field(default_factory=dict)  # TRL's clip ratios (and kl)
    entropy_sum: float = 0.0  # summed over the loss mask's tokens
    entropy_count: float = 0.0  # those tokens

    @property
    def entropy(self) -> float:
        return self.entropy_sum / max(self.entropy_count, 1.0)


def grpo_step(
    policy,
    optimizer,
    scheduler,
    groups: Groups,
    cfg: TrainConfig,
    rows_per_pass: RowsPerPass | None = None,
    threads: UpdateThreads | None = None,
) -> StepOutput:
    """Advantages, loss and one optimizer update per iteration on already-sampled groups.

    `rows_per_pass` (the run's, so what an out-of-memory taught it lasts) decides how many
    completions each pass takes; by default the config's micro_batch_size, 0 meaning auto.
    `threads` (the run's) chooses the CPU threads of the passes; by default all of torch's."""
    a = cfg.algorithm
    G = a.num_generations
    c = groups.completions
    N = c.completion_ids.size(0)
    advantages, group_std = compute_advantages(
        groups.totals, G, scale=a.scale_rewards, std_type=a.std_type
    )  # (N,), (B,)
    advantages = advantages.to(policy.device)  # (N,)
    mask = c.completion_mask  # (N, C)
    if a.mask_truncated_completions:
        # DAPO's overlong filtering: a completion cut off by the length limit was scored
        # without its ending, so its reward says little about its tokens.
        mask = mask * (~c.truncated).float().unsqueeze(1)  # (N, C)
    timings = replace(groups.timings)  # a copy: the same groups may be stepped again (tests)
    notes: list[str] = []
    batch = _Batch(c, a.temperature, advantages, mask)
    # The entropy metric: from the sampler when it measured it (the same distributions the
    # first pass would see, up to float rounding), else measured by that pass.
    entropy = None
    if c.entropy is not None:
        entropy = float((c.entropy * mask).sum() / mask.sum().clamp(min=1.0))
    # Only rows whose loss has a gradient go through the update (issue 28): with no KL term a
    # row with advantage 0 (its group all right or all wrong) or no loss tokens adds exactly 0.
    quiet = None  # the rows left out, whose entropy the first pass measures when needed
    teaches = _teaching_rows(batch, a)  # (N,) bool, or None: every row
    if teaches is not None:
        if entropy is None:
            quiet = batch.rows(torch.nonzero(~teaches).flatten())
        batch = batch.rows(torch.nonzero(teaches).flatten())
    batch = replace(batch, with_entropy=entropy is None)
    threads = threads or UpdateThreads(policy.device)
    full = (N, c.prompt_ids.size(1), c.completion_ids.size(1))  # what the rows per pass fit
    # LoRA layers add their adapter in one product (ops/lora_product.py), backward included.
    with threads.passes(_work(batch, quiet, a)), fused_lora(policy.model):
        first_pass, grad_norm, mb = _passes(
            policy, optimizer, scheduler, cfg, batch, quiet, full, rows_per_pass, timings, notes
        )

    lengths = c.lengths.tolist()
    adv = advantages.tolist()
    rows = rollout_rows(groups, adv, lengths)
    scored_adv = [row["advantage"] for row in rows if row["advantage"] is not None]
    metrics = step_metrics(groups, group_std, lengths, G)
    metrics.update(first_pass.metrics)
    metrics.update(timings.metrics())
    metrics.update(
        {
            "loss": first_pass.loss,
            "grad_norm": grad_norm,
            "entropy": first_pass.entropy if entropy is None else entropy,
            "learning_rate": scheduler.get_last_lr()[0],
            "num_tokens": float(c.prompt_mask.sum() + c.completion_mask.sum()),
            "micro_batch_rows": float(mb),
        }
    )
    prompts = [shown_prompt(ex.problem) for ex in groups.examples]
    return StepOutput(rows, metrics, scored_adv, prompts, notes)


def _work(batch: _Batch, quiet: _Batch | None, a) -> float:
    """The step's passes in forward-token units (update_threads.pass_work)."""

    def tokens(b: _Batch | None) -> int:
        return 0 if b is None else b.N * (b.completions.prompt_ids.size(1) + b.mask.size(1))

    extra = (a.num_iterations > 1) + (a.beta > 0)  # no-gradient passes over the trained rows
    return pass_work(tokens(batch) * a.num_iterations, tokens(quiet) + tokens(batch) * extra)


def _passes(policy, optimizer, scheduler, cfg, batch, quiet, full, rows_per_pass, timings, notes):
    """The step's log-prob passes, updates and optimizer steps over `batch` (the entropy also
    over `quiet`): (the first pass's totals, the last grad norm, the rows per pass). `full`:
    (N, P, C) of the step's whole batch."""
    a = cfg.algorithm
    t0 = time.perf_counter()
    # Micro-batches: the activations of all N rows need not fit in memory at once. Each pass
    # takes `mb` rows and accumulates gradients, weighted so they add up to the step's loss.
    # Chosen for all N rows, so passes over fewer or narrower rows fit as well.
    rows_per_pass = rows_per_pass or RowsPerPass(a.micro_batch_size)
    mb = rows_per_pass.choose(policy, cfg, *full)
    batch, mb = halving_on_oom(
        lambda mb: _with_old_and_ref_logps(policy, batch, mb, a), mb, rows_per_pass, policy, notes
    )
    timings.ref = time.perf_counter() - t0
    t1 = time.perf_counter()
    grad_norm = math.nan
    first_pass = _PassTotals()
    policy.model.train()
    for iteration in range(a.num_iterations):
        # A pass that runs out of memory is redone with half the rows; its partial gradients are
        # dropped first, or the rows it did get through would count twice.
        totals, mb = halving_on_oom(
            lambda mb, first=iteration == 0: _update_pass(
                policy, batch, mb, a, quiet if first else None, first
            ),
            mb,
            rows_per_pass,
            policy,
            notes,
            drop_gradients=True,
        )
        if iteration == 0:
            # The step reports the first iteration's loss and metrics: that one is measured on
            # the policy that sampled, like every step's; later ones see it already moved.
            first_pass = totals
        grad_norm = _optimizer_update(policy, optimizer, scheduler, a.max_grad_norm, timings)
    # time/update is the policy forward and backward passes; time/optimizer the clip and step.
    timings.update = time.perf_counter() - t1 - timings.optimizer
    return first_pass, grad_norm, mb


# Loss types whose rows add up independently (a row's term does not depend on which rows share
# its micro-batch): grpo and dr_grpo divide by the step's rows, dapo by its tokens. bnpo divides
# each micro-batch by its own tokens, so its rows cannot be left out.
ROW_SEPARABLE = ("grpo", "dr_grpo", "dapo")


def _teaching_rows(batch: _Batch, a) -> torch.Tensor | None:
    """Which rows (N,) bool have a loss term with a gradient, or None when that is every row
    (or when rows cannot be left out: a KL term, which every token has, or bnpo's per-micro-batch
    divisor). A row with advantage exactly 0 has per-token loss −min(w·0, clip(w)·0) = 0 at any
    ratio w; a row without loss tokens (all masked) has none: leaving both out of the forward and
    backward gives the same gradient and loss."""
    if a.beta > 0 or a.loss_type not in ROW_SEPARABLE:
        return None
    teaches = (batch.advantages != 0) & (batch.mask.sum(dim=1) > 0)  # (N,)
    return None if bool(teaches.all()) else teaches


def _slices(n: int, mb: int) -> list[slice]:
    return [slice(s, s + mb) for s in range(0, n, mb)]


def _logps_of_all_rows(model, batch: _Batch, mb: int) -> torch.Tensor:
    """Log-probs (N, C) of every row under `model`, mb rows at a time (call under no_grad)."""
    parts = []
    for s in _slices(batch.N, mb):
        logps, _ = batch.token_logps(model, s)  # (mb, C)
        parts.append(logps)
    return torch.cat(parts)  # (N, C)


def _with_old_and_ref_logps(policy, batch: _Batch, mb: int, a) -> _Batch:
    """`batch` with log-probs (N, C) under the policy before the update (more than one
    iteration) and under the reference (β > 0), each None when not needed; no gradients."""
    old_logps = ref_logps = None
    with torch.no_grad():
        # With one iteration the policy that sampled is the one being updated: the loss uses
        # logps.detach() as old_logps (ratio exactly 1) and this pass is skipped. With several,
        # later iterations need the sampling policy's log-probs, so they are taken now, before
        # the first optimizer step moves it.
        if a.num_iterations > 1:
            old_logps = _logps_of_all_rows(policy.model, batch, mb)  # (N, C)
        if a.beta > 0:
            # The reference is the starting model. With LoRA that is the same network with its
            # adapter switched off, so no second copy of the weights is held in memory.
            with policy.reference() as ref:
                ref_logps = _logps_of_all_rows(ref, batch, mb)  # (N, C)
    return replace(batch, old_logps=old_logps, ref_logps=ref_logps)


def _update_pass(
    policy, batch: _Batch, mb: int, a, quiet: _Batch | None, first: bool
) -> _PassTotals:
    """One forward and backward over the batch's rows, mb at a time, gradients accumulated; the
    loss, TRL's metrics and the entropy of the pass when `first`, that entropy also over the
    `quiet` rows (left out of the update: no gradient), measured without gradients."""
    N = batch.step_rows or batch.N  # the step's rows: the divisor of grpo's and dr_grpo's mean
    slices = _slices(batch.N, mb)
    totals = _PassTotals()
    step_tokens = batch.mask.sum() if batch.step_tokens is None else batch.step_tokens
    num_items = step_tokens.clamp(min=1.0)  # () the step's loss tokens, for dapo
    if not slices:
        # No row teaches: the gradient is exactly 0, and the optimizer still steps with it (its
        # moments decay, weight decay applies) as it would after a backward of the zero loss.
        for p in policy.trainable_parameters():
            p.grad = torch.zeros_like(p)
    for s in slices:
        logps, entropy = batch.token_logps(
            policy.model, s, with_entropy=first and batch.with_entropy
        )  # (mb, C) each
        n_rows = logps.size(0)
        out = policy_loss(
            logps,
            None if batch.old_logps is None else batch.old_logps[s],  # (mb, C)
            None if batch.ref_logps is None else batch.ref_logps[s],  # (mb, C)
            batch.advantages[s],  # (mb,)
            batch.mask[s],  # (mb, C)
            loss_type=a.loss_type,
            level=a.importance_sampling_level,
            epsilon_low=a.epsilon_low,
            epsilon_high=a.epsilon_high,
            beta=a.beta,
            max_completion_length=a.max_completion_length,
            num_items_in_batch=num_items,
        )
        # Per-micro-batch normalisation as in TRL with gradient accumulation: sequence means
        # (grpo, dr_grpo) are weighted by rows, bnpo by micro-batch count; dapo is global.
        weight = {"dapo": 1.0, "bnpo": 1.0 / len(slices)}.get(a.loss_type, n_rows / N)
        (out.loss * weight).backward()
        if first:
            totals.loss += float(out.loss.detach()) * weight
            for k, v in out.metrics.items():
                totals.metrics[k] = totals.metrics.get(k, 0.0) + v * n_rows / N
            if entropy is not None:
                totals.entropy_sum += float((entropy * batch.mask[s]).sum())
                totals.entropy_count += float(batch.mask[s].sum())
    if first and quiet is not None and float(quiet.mask.sum()) > 0:
        with torch.no_grad():
            for s in _slices(quiet.N, mb):
                _, entropy = quiet.token_logps(policy.model, s, with_entropy=True)  # (mb, C)
                totals.entropy_sum += float((entropy * quiet.mask[s]).sum())
                totals.entropy_count += float(quiet.mask[s].sum())
    return totals
