"""Rows per pass: "auto" from free memory, halved and redone on an out-of-memory, or fixed.

A CPU has no out-of-memory exception a test could provoke safely, so the GPU's limit is played by
a test double: a forward pre-hook on the model's first decoder layer raises
torch.OutOfMemoryError when a forward carries more rows than the "GPU" holds. The forward it
interrupts is the real one, and everything after (dropping the pass, halving, redoing it) is the
real code. Where "auto" must choose from a given amount of memory, the machine's free memory is
likewise replaced by a figure (micro_batch.free_bytes).
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.control import TrainControl
from grpo_desktop.engine.data.dataset import load_data
from grpo_desktop.engine.estimate import micro_batch
from grpo_desktop.engine.estimate.memory import (
    USABLE_FRACTION,
    ModelShape,
    activation_bytes_per_row,
    cpu_rows_cap,
    fixed_pass_bytes,
    row_tokens,
    rows_per_pass,
)
from grpo_desktop.engine.estimate.micro_batch import RowsPerPass
from grpo_desktop.engine.grpo import trainer
from grpo_desktop.engine.grpo.step import grpo_step, sample_groups
from grpo_desktop.engine.grpo.trainer import make_scheduler, train
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.ops.fused_head import CHUNK_ELEMENTS, chunk_tokens
from grpo_desktop.engine.rewards.functions import RewardSet

QWEN_05B = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
}


def test_rows_per_pass_fill_the_usable_memory_in_whole_groups():
    # 100 MB per row, half of 1 GB usable: 5 rows fit, 4 as whole groups of 2; with 8-row groups
    # fewer than a group fits, so 5 rows (a group split rather than nothing).
    assert rows_per_pass(10**9, 10**8, rows=32, group=2) == 4
    assert rows_per_pass(10**9, 10**8, rows=32, group=8) == 5
    assert rows_per_pass(10**9, 10**8, rows=3, group=2) == 3  # all rows fit
    assert rows_per_pass(10**9, 10**8, rows=32, fixed_bytes=5 * 10**8) == 1  # at least one
    assert rows_per_pass(None, 10**8, rows=32) == 32  # unknown free memory: all at once
    # The CPU cap: 768 MiB of activations per pass; 40 MiB rows: 19 rows, 16 as whole groups.
    assert cpu_rows_cap(40 * 2**20) == 19
    assert rows_per_pass(10**12, 40 * 2**20, rows=32, group=8, max_rows=19) == 16


def test_activation_estimate_grows_with_the_tokens_and_shrinks_with_checkpointing():
    shape = ModelShape.from_config(QWEN_05B)
    assert shape == ModelShape(896, 24, 14, 2, 4864, 151936)
    short = activation_bytes_per_row(shape, 170, 2, lora_r=16)
    long = activation_bytes_per_row(shape, 340, 2, lora_r=16)
    assert 2 * short <= long < 2.5 * short  # linear in tokens, plus the attention weights
    assert activation_bytes_per_row(shape, 170, 2, checkpointing=True) < short / 5
    # Per token and layer in bf16: (7·896 + 4·4864 + 7·16)·2 + 6·896·4 + 14·170·2 bytes.
    per_token_layer = (7 * 896 + 4 * 4864 + 7 * 16) * 2 + 6 * 896 * 4 + 14 * 170 * 2
    assert short == 24 * 170 * per_token_layer + 170 * 4 * 896 * 4
    assert fixed_pass_bytes(shape, 110) == 3 * 110 * 151936 * 4


def _cfg(model_dir, **algo):
    return TrainConfig().replace(
        model={"name_or_path": model_dir},
        data={"eval_size": 0, "arithmetic_size": 200},
        algorithm={
            "num_generations": 4,
            "prompts_per_step": 4,
            "max_completion_length": 6,
            "min_completion_length": 6,
            "learning_rate": 0.01,
            "beta": 0.04,
            **algo,
        },
        run={"max_steps": 2, "eval_every": 0, "checkpoint_every": 100, "seed": 3},
    )


class GpuLimit:
    """Test double for a GPU that holds `rows` rows per forward of whole sequences: raises
    torch.OutOfMemoryError from the real forward of the first decoder layer when more come (from
    the `after`-th such forward with gradients on; 0: every one). Sampling's one-token decode
    steps fit: what overflows is the scoring passes' activations."""

    def __init__(self, model, rows: int, after: int = 0):
        self.rows, self.after, self.seen = rows, after, 0
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        layer = base.get_decoder().layers[0]
        self.handle = layer.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.size(0) <= self.rows or hidden.size(1) == 1:
            return None
        if self.after and torch.is_grad_enabled():
            self.seen += 1
            if self.seen < self.after:
                return None
        elif self.after:
            return None
        raise torch.OutOfMemoryError(f"test double: {hidden.size(0)} rows > {self.rows}")


class _Fixture:
    """One policy and one sampled batch; `step` runs grpo_step from the same starting weights."""

    def __init__(self, model_dir):
        self.cfg = _cfg(model_dir)
        self.policy = load_policy(self.cfg)
        with torch.no_grad():  # B = 0 at init would make the first update's KL term vanish
            for name, p in self.policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
        self.start = [p.detach().clone() for p in self.policy.trainable_parameters()]
        rewards = RewardSet(self.cfg.rewards)
        examples = load_data(self.cfg.data, seed=3).train[:4]
        torch.manual_seed(0)
        self.groups = sample_groups(self.policy, examples, self.cfg, rewards)
        rewards.close()
        assert self.groups.completions.completion_ids.size(0) == 16

    def step(self, rows: RowsPerPass, limit: GpuLimit | None = None):
        params = self.policy.trainable_parameters()
        with torch.no_grad():
            for p, p0 in zip(params, self.start):
                p.copy_(p0)
        # SGD: the update is the gradient times lr, so equal gradients give equal weights (AdamW's
        # first step, ±lr wherever the gradient is not exactly 0, would amplify rounding).
        optimizer = torch.optim.SGD(params, lr=self.cfg.algorithm.learning_rate)
        try:
            out = grpo_step(
                self.policy, optimizer, make_scheduler(optimizer, self.cfg), self.groups,
                self.cfg, rows,
            )  # fmt: skip
        finally:
            if limit is not None:
                limit.handle.remove()
        return out, [p.detach().clone() for p in params]


def _same(a, b, atol):
    out_a, params_a = a
    out_b, params_b = b
    assert abs(out_a.metrics["loss"] - out_b.metrics["loss"]) <= atol
    assert abs(out_a.metrics["kl"] - out_b.metrics["kl"]) <= atol
    assert all(torch.allclose(x, y, rtol=0, atol=atol) for x, y in zip(params_a, params_b))


def test_an_out_of_memory_halves_the_rows_and_redoes_the_pass(micro_model_dir):
    f = _Fixture(micro_model_dir)
    rows = RowsPerPass()  # auto: this CPU's free RAM takes all 16 rows at once
    halved = f.step(rows, GpuLimit(f.policy.model, rows=4))
    # The reference pass ran out at 16 and 8 rows, then went through at 4; so did the update.
    assert rows.cap == 4 and halved[0].metrics["micro_batch_rows"] == 4
    assert [n.split(":")[0] for n in halved[0].notes] == [
        "Out of memory with 16 completions per pass",
        "Out of memory with 8 completions per pass",
    ]
    assert f.step(rows)[0].metrics["micro_batch_rows"] == 4  # the cap holds for later steps
    fixed = f.step(RowsPerPass(4))
    assert fixed[0].notes == []
    _same(halved, fixed, atol=0.0)  # the same passes as a run set to 4: the same result, exactly
    whole = f.step(RowsPerPass(16))  # un-halved: one pass of 16, equal up to float rounding
    _same(halved, whole, atol=1e-6)
    assert any(not torch.equal(p, p0) for p, p0 in zip(halved[1], f.start))  # it did train


def test_gradients_of_a_pass_that_ran_out_are_dropped(micro_model_dir, monkeypatch):
    f = _Fixture(micro_model_dir)
    a = f.cfg.algorithm
    shape = ModelShape.from_config(f.policy.model.config)
    P, C = f.groups.completions.prompt_ids.size(1), f.groups.completions.completion_ids.size(1)
    tokens = row_tokens(P, C, a.num_generations, checkpointing=False)  # the prompt shared by G
    per_row = activation_bytes_per_row(shape, tokens, 4, lora_r=f.cfg.lora.r)
    fixed = fixed_pass_bytes(shape, chunk_tokens(shape.vocab, CHUNK_ELEMENTS))
    free = int((fixed + 9.5 * per_row) / USABLE_FRACTION)  # room for 9 rows: 8 in whole groups
    monkeypatch.setattr(micro_batch, "free_bytes", lambda device: free)
    rows = RowsPerPass()
    assert rows.choose(f.policy, f.cfg, 16, P, C) == 8
    # The first 8-row micro-batch of the update goes forward and backward; the second runs out.
    halved = f.step(rows, GpuLimit(f.policy.model, rows=4, after=2))
    assert rows.cap == 4 and len(halved[0].notes) == 1 and a.loss_type == "grpo"
    _same(halved, f.step(RowsPerPass(4)), atol=1e-6)  # not counted twice: as if set to 4


def test_a_run_logs_each_halving_once_and_a_fixed_size_fails_with_advice(
    micro_model_dir, monkeypatch
):
    real = trainer.load_policy
    limits = []

    def limited(cfg, *args, **kwargs):  # the run's own policy, on a "GPU" of 4 rows
        policy = real(cfg, *args, **kwargs)
        limits.append(GpuLimit(policy.model, rows=4))
        return policy

    monkeypatch.setattr(trainer, "load_policy", limited)
    events = list(train(_cfg(micro_model_dir), TrainControl()))
    assert events[-1].status == "completed", events[-1].message
    notes = [e for e in events if e.type == "log" and "Out of memory" in e.message]
    assert [(e.step, e.level) for e in notes] == [(1, "warning"), (1, "warning")]  # 16→8→4
    steps = [e for e in events if e.type == "step"]
    assert [e.metrics["micro_batch_rows"] for e in steps] == [4.0, 4.0]

    events = list(train(_cfg(micro_model_dir, micro_batch_size=8), TrainControl()))
    assert events[-1].status == "failed"
    assert "Out of memory" in events[-1].message and "micro-batch size" in events[-1].message


def test_a_groups_shared_prompt_counts_once_when_choosing_rows_per_pass():
    # SmolLM2-135M with a system prompt and a worked example: 80 prompt tokens, 25-token answers.
    # Counting the prompt in every row, the CPU cap gave 2-3 rows a pass, so each pass ran the
    # prompt again and a step took 16 passes; shared by the group's 8 rows it is one group a pass.
    smol = ModelShape(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536, vocab=49152)
    assert row_tokens(80, 25, 8, checkpointing=False) == 35
    assert row_tokens(80, 25, 8, checkpointing=True) == 105  # checkpointed layers share nothing
    assert row_tokens(80, 25, 1, checkpointing=False) == 105
    per_row = activation_bytes_per_row(smol, row_tokens(80, 25, 8, False), 4, lora_r=16)
    assert cpu_rows_cap(activation_bytes_per_row(smol, 105, 4, lora_r=16)) < 8
    assert rows_per_pass(20 * 2**30, per_row, 32, group=8, max_rows=cpu_rows_cap(per_row)) >= 8
