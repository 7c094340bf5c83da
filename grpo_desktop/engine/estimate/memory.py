"""Rough memory arithmetic for a GRPO step: activation bytes per completion row, rows per pass.

The micro-batch "auto" setting (algorithm.micro_batch_size = 0) asks `rows_per_pass` how many
completions one forward/backward pass of the policy may take, given the memory free now and
`activation_bytes_per_row` for the model's shape (what autograd keeps per token and layer of a
Llama-family model). On the CPU "auto" also stops at CPU_PASS_BYTES of activations per pass
(`cpu_rows_cap`). Torch-free (plain numbers in and out), so the settings side can show it before
anything loads. Not counted: weights, gradients and optimizer state (they do not grow with the
rows), the sampling KV cache, the allocator's fragmentation (hence `rows_per_pass` uses only part
of the free memory). Calibrated on the CPU against peak RSS on the Qwen2.5-0.5B-shaped model
(bench/memory.py), not on every architecture: an estimate, not a guarantee; a CUDA
out-of-memory inside a step halves the rows and redoes the pass (micro_batch.py).

Try it:  grpo-desktop estimate --demo  (its "rows per pass")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LORA_MODULES = 7  # q, k, v, o, gate, up, down
USABLE_FRACTION = 0.5  # of the free memory, for a pass's activations (the rest: fragmentation,
# the optimizer's and the allocator's temporaries, other programs)
# On the CPU a pass holding more activations than this runs no faster per token (bench/README.md,
# "Where the speed comes from"), so "auto" stops there and leaves the RAM to the rest of the
# computer. Small models stay whole: the demo's 32 rows of 160 tokens are ≈ 590 MiB.
CPU_PASS_BYTES = 768 * 2**20


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        """From a transformers config object or its dict (config.json); missing sizes are guessed
        from the hidden size as Llama does."""

        def get(name: str, default: Any = None) -> Any:
            if isinstance(config, dict):
                return config.get(name, default)
            return getattr(config, name, default)

        text = get("text_config")  # multimodal wrappers keep the language model's sizes here
        if text is not None and get("hidden_size") is None:
            return cls.from_config(text)
        hidden = int(get("hidden_size") or get("n_embd") or get("d_model") or 1024)
        heads = int(get("num_attention_heads") or get("n_head") or max(1, hidden // 64))
        return cls(
            hidden=hidden,
            layers=int(get("num_hidden_layers") or get("n_layer") or 1),
            heads=heads,
            kv_heads=int(get("num_key_value_heads") or heads),
            intermediate=int(get("intermediate_size") or get("n_inner") or 4 * hidden),
            vocab=int(get("vocab_size") or 32000),
        )


def activation_bytes_per_row(
    shape: ModelShape,
    tokens: int,
    dtype_bytes: int = 4,
    *,
    lora_r: int = 0,
    checkpointing: bool = False,
) -> int:
    """Bytes the policy's forward keeps for its backward for one completion row of `tokens`
    tokens (prompt + completion; with prompt sharing the prompt counts once per group). Per token
    and layer, in the compute dtype unless noted: the normed inputs of the attention and MLP
    blocks (2H), queries, keys, values after the rotary embedding and the attention output (4H,
    keys and values repeated to all heads as transformers does for grouped-query attention), the
    output projection's input (H), the MLP's gate, up, activation and product (4I), each LoRA
    module's rank-r intermediate (7r); each RMSNorm's float32 internals (3H float32, two norms);
    the attention weights (heads × tokens), as if materialised (CUDA's flash kernels do not: an
    overestimate there). With gradient checkpointing only each layer's input (H) stays, plus one
    layer's worth while it is recomputed. Per token, not per layer: the embedding output, the
    final hidden states and their gradient (4H). The output layer's chunk of logits is
    `fixed_pass_bytes`, not per row."""
    H, inter, b = shape.hidden, shape.intermediate, dtype_bytes
    kept = (2 * H + 4 * H + H + 4 * inter + LORA_MODULES * lora_r) * b + 2 * 3 * H * 4
    scores = shape.heads * tokens * b  # per token: its row of attention weights
    per_layer = tokens * (kept + scores)
    if checkpointing:
        layers_kept = shape.layers * tokens * H * b + per_layer
    else:
        layers_kept = shape.layers * per_layer
    return int(layers_kept + tokens * 4 * H * max(b, 4))


def row_tokens(prompt_tokens: int, completion_tokens: int, group: int, checkpointing: bool) -> int:
    """Tokens a completion row puts through the policy's forward in a pass: its completion, and
    its share of the prompt, which a group's G rows run through the decoder once (prompt sharing,
    sampling/logps.py; not under gradient checkpointing, whose layers drop the shared keys and
    values). With a long prompt (a system prompt and a worked example) and short answers this is
    what decides how many rows a pass takes: SmolLM2's 80-token prompt and 25-token answers are
    35 tokens a row in a group of 8, not 105."""
    if checkpointing or group <= 1:
        return prompt_tokens + completion_tokens
    return -(-prompt_tokens // group) + completion_tokens


def cpu_rows_cap(per_row_bytes: int, group: int = 1) -> int:
    """Most rows a CPU pass takes when each keeps `per_row_bytes` (CPU_PASS_BYTES), but never
    fewer than one `group` (pass G when its rows share their prompt): a group split over passes
    runs its prompt once per pass, which costs more than the larger pass (SmolLM2, 80-token
    prompt: 6 rows a pass 36 s a step, a group of 8 less)."""
    return max(1, group, CPU_PASS_BYTES // max(1, per_row_bytes))


def fixed_pass_bytes(shape: ModelShape, chunk_tokens: int) -> int:
    """Bytes a pass needs whatever its rows: the output layer's chunk of float32 logits, about
    three copies alive at once (logits, their exponentials, the gradient)."""
    return 3 * chunk_tokens * shape.vocab * 4


def rows_per_pass(
    free_bytes: int | None,
    per_row_bytes: int,
    rows: int,
    group: int = 1,
    fixed_bytes: int = 0,
    usable_fraction: float = USABLE_FRACTION,
    max_rows: int | None = None,
) -> int:
    """How many of `rows` completions one pass may take: as many as fit in `usable_fraction` of
    `free_bytes` after `fixed_bytes` (all of them when the free memory is unknown), at most
    `max_rows`, at least 1. Rounded down to whole groups of `group` rows when at least one group
    fits, so a group's rows share their prompt within a pass."""
    fit = rows
    if free_bytes is not None and per_row_bytes > 0:
        budget = free_bytes * usable_fraction - fixed_bytes
        fit = int(budget // per_row_bytes) if budget > 0 else 1
    fit = max(1, min(rows, fit, max_rows or rows))
    if group > 1 and fit >= group and fit < rows:
        fit -= fit % group
    return fit
