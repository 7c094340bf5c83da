"""The arithmetic of the memory estimate before Start: plain numbers in, a dict out.

fit.py reads the model's sizes (config.json on the meta device) and the device, then calls
`memory` here (and `seconds` in timing.py). Torch-free, so the settings side can recompute it as
settings change. A run's peak is modelled as what stays for the whole run plus the largest of its
three phases (sampling's memory is freed before the training passes start, theirs before AdamW
steps), each term one function below, its constants calibrated on bench/estimate.py's runs:
    total = overhead + weights + adapters_optimizer + max(activations + logits,
                                                          kv_cache + sampling_other,
                                                          optimizer_step)
Does not read files or touch a device. Models that are not decoder-only transformers of the
Llama family's layout are read the same way: the estimate is as good as that resemblance.

Try it:  grpo-desktop estimate --demo
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_desktop.engine.estimate.memory import (
    ModelShape,
    activation_bytes_per_row,
    cpu_rows_cap,
    fixed_pass_bytes,
    row_tokens,
    rows_per_pass,
)

MiB = 2**20
CHUNK_ELEMENTS = 2**24  # the fused head's logits per chunk (engine/ops/fused_head.py, kept in step)
# A run's process before its own tensors (Python, torch, transformers, peft, the engine, the
# reward checkers, tokenizer and data code, torch's threads): the peak RSS of a demo run too
# small to count, less the demo's own memory (bench/README.md, `estimate.py`).
CPU_BASELINE_BYTES = 560 * MiB
# bitsandbytes on the CPU: its library and buffers after one 4-bit forward and backward, beyond
# the weights (bench/estimate.py --baseline).
BNB_CPU_RUNTIME_BYTES = 70 * MiB
# Of the dynamic memory: what the C heap keeps after frees (fitted on bench/estimate.py's runs).
CPU_ALLOCATOR_SHARE = 0.12
CUDA_WORKSPACE_BYTES = 32 * MiB  # cuBLAS workspace (inside the caching allocator)
CUDA_CONTEXT_BYTES = 600 * MiB  # CUDA context and kernels: not in max_memory_allocated
CUDA_CACHE_SHARE = 0.10  # of the total: blocks torch's allocator reserves but does not use
TIGHT_SHARE = 0.10  # headroom below this share of the free memory is "tight"
DTYPE_NAMES = {"float32": "float32", "bfloat16": "bf16", "float16": "fp16"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Params:
    """Parameter counts of the model (real weights, tied matrices once)."""

    total: int
    embedding: int  # input embedding (tied to the output layer or not): never quantized
    output: int  # an untied output layer's weights (0 when tied)
    linear: int  # the decoder layers' nn.Linear weights: what 4-bit and 8-bit quantize
    lora: int  # LoRA adapter weights for the settings' rank and target modules
    tied: bool = True


@dataclass(frozen=True)
class Device:
    kind: str  # "cuda" or "cpu"
    name: str
    free_bytes: int | None
    total_bytes: int | None
    flops: float  # dense products per second in the compute dtype, as training reaches them
    bandwidth: float  # bytes per second the weights stream at while decoding


@dataclass(frozen=True)
class Settings:
    """What the estimate depends on, from a TrainConfig (`from_config`)."""

    B: int
    G: int
    prompt_tokens: int
    completion_tokens: int
    lora: bool
    lora_r: int
    quant: str  # "none", "8bit", "4bit"
    double_quant: bool
    dtype: str  # compute dtype: "float32", "bfloat16", "float16"
    beta: float
    num_iterations: int
    checkpointing: bool
    micro_batch: int  # 0 = auto
    top_p: float = 1.0  # < 1: the sampler finds each row's nucleus at every token
    sampling_bf16: bool = False  # model.sampling_precision "bfloat16": the decode's weight copies

    @classmethod
    def from_config(cls, cfg, dtype: str, prompt_tokens: int) -> Settings:
        a = cfg.algorithm
        return cls(
            B=a.prompts_per_step,
            G=a.num_generations,
            prompt_tokens=prompt_tokens,
            completion_tokens=a.max_completion_length,
            lora=cfg.lora.enabled,
            lora_r=cfg.lora.r,
            quant=cfg.quantization.mode,
            double_quant=cfg.quantization.double_quant,
            dtype=dtype,
            beta=a.beta,
            num_iterations=a.num_iterations,
            checkpointing=cfg.model.gradient_checkpointing,
            micro_batch=a.micro_batch_size,
            top_p=a.top_p,
            sampling_bf16=cfg.model.sampling_precision == "bfloat16",
        )

    @property
    def rows(self) -> int:
        return self.B * self.G

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 4)


def weights_detail(p: Params, s: Settings) -> dict[str, int]:
    """Bytes of the loaded weights by storage: {"4bit": …, "bf16": …}, as loading.py loads them:
    4-bit NF4 (½ byte a weight plus its absmax) or 8-bit decoder projections with everything else
    in the compute dtype (QLoRA keeps embeddings, norms and head there); float32 master weights
    for full fine-tuning in a half precision; the frozen reference copy of full fine-tuning with
    β > 0 in the compute dtype."""
    b, name = s.dtype_bytes, DTYPE_NAMES.get(s.dtype, s.dtype)
    out: dict[str, int] = {}
    if s.quant == "4bit":
        absmax = 1 + 4 / 256 if s.double_quant else 4  # per block of 64 weights
        out["4bit"] = int(p.linear * 0.5 + p.linear / 64 * absmax)
        out[name] = (p.total - p.linear) * b
    elif s.quant == "8bit":
        out["8bit"] = int(p.linear * 1.0 + p.linear / 256 * 4)  # plus per-row scales
        out[name] = (p.total - p.linear) * b
    else:
        masters = not s.lora and b < 4
        store = 4 if masters else b
        out[DTYPE_NAMES["float32"] if store == 4 else name] = p.total * store
        if not s.lora and s.beta > 0:
            out[name] = out.get(name, 0) + p.total * b
    return out


def trainable(p: Params, s: Settings) -> int:
    return p.lora if s.lora else p.total


def optimizer_bytes(p: Params, s: Settings) -> int:
    """Trainable weights' own extra memory: LoRA adapters in float32 (peft upcasts them), their
    gradients and AdamW's two moments, 16 bytes a weight; for full fine-tuning gradients and
    moments in the master weights' float32 (3 × 4 bytes)."""
    if s.lora:
        return p.lora * (4 + 4 + 8)
    return p.total * 3 * 4  # float32 (master) weights: float32 gradients and moments


def optimizer_step_bytes(shape: ModelShape, p: Params, s: Settings, device_kind: str) -> int:
    """AdamW's temporaries while it steps (activations are gone by then, gradients are not): on
    CUDA the multi-tensor update takes the square root of every second moment at once (4 bytes a
    trainable weight); on the CPU it goes tensor by tensor, and the largest tensor's
    denominator (square root, then divided) takes two temporaries. LoRA's adapters are small
    either way."""
    if s.lora:
        return p.lora * 4 if device_kind == "cuda" else 0
    if device_kind == "cuda":
        return p.total * 4
    return 2 * max(p.embedding, p.output, shape.hidden * shape.intermediate) * 4


def decoder_params(p: Params) -> int:
    """Weights a token's forward multiplies by in the decoder (not the embedding lookup)."""
    return max(0, p.total - p.embedding - p.output)


def kv_cache_bytes(shape: ModelShape, s: Settings, device_kind: str) -> int:
    """Keys and values of all rows over prompt + completion, in the compute dtype. The CPU's lean
    decoder keeps the prefill's cache (prompt positions) beside its own buffers."""
    head_dim = shape.hidden // max(1, shape.heads)
    per_position = 2 * shape.layers * shape.kv_heads * head_dim * s.dtype_bytes
    positions = s.prompt_tokens + s.completion_tokens
    if device_kind == "cpu":
        positions += s.prompt_tokens
    return s.rows * positions * per_position


def sampling_other_bytes(shape: ModelShape, p: Params, s: Settings, device_kind: str) -> int:
    """The sampling phase's other memory: float32 logits of the rows (about four copies: the
    head's output, its float32 copy, the scaled logits, the softmax), the prefill's activations
    for one layer at a time, and with LoRA on float32 CPU weights the merged copy of the
    decoder's projections (engine/sampling/sampler.py's lora_merged); with bfloat16 sampling on
    float32 CPU weights, the decode's bfloat16 copy of every product's weight (assumed made: the
    estimate does not know whether this CPU multiplies bfloat16 natively)."""
    logits = 4 * s.rows * shape.vocab * 4
    P = s.prompt_tokens
    prefill = s.B * P * (4 * shape.hidden + 3 * shape.intermediate) * s.dtype_bytes
    prefill += s.B * shape.heads * P * P * s.dtype_bytes  # attention weights of one layer
    merged = p.linear * 4 if (s.lora and s.quant == "none" and device_kind == "cpu") else 0
    if s.dtype_bytes < 4:
        merged = 0
    rounded = 0
    if s.sampling_bf16 and s.quant == "none" and device_kind == "cpu" and s.dtype_bytes == 4:
        head = p.embedding if p.tied else p.output
        rounded = (p.linear + head) * 2  # engine/sampling/decode.py's _Rounding
    return int(logits + prefill + merged + rounded)


def pass_rows(shape: ModelShape, p: Params, s: Settings, dev: Device, resident: int) -> int:
    """Rows per pass of the policy, as micro_batch.py picks them: the fixed setting, or (auto)
    what fits in the memory left after `resident` bytes, on the CPU at most 768 MiB."""
    if s.micro_batch > 0:
        return max(1, min(s.micro_batch, s.rows))
    per_row = row_bytes(shape, s)
    free = None if dev.free_bytes is None else max(0, dev.free_bytes - resident)
    return rows_per_pass(
        free,
        per_row,
        s.rows,
        group=s.G,
        fixed_bytes=fixed_pass_bytes(shape, chunk_tokens(shape.vocab)),
        max_rows=cpu_rows_cap(per_row, 1 if s.checkpointing else s.G)
        if dev.kind == "cpu"
        else None,
    )


def logits_bytes(shape: ModelShape, s: Settings, rows: int) -> int:
    """The fused head's chunk of float32 logits, about three copies alive at once (the logits,
    their softmax, the product that turns it into d logp / dh: memory.fixed_pass_bytes),
    never more tokens than a pass has; with full fine-tuning also the output weight's gradient
    temporary."""
    tokens = min(chunk_tokens(shape.vocab), rows * s.completion_tokens)
    chunk = fixed_pass_bytes(shape, max(1, tokens))
    if s.lora:
        return chunk
    # Full fine-tuning trains the output layer (or the embedding tied to it): its backward adds
    # each chunk's (V, H) weight gradient to the sum, and the embedding's dense gradient is added
    # to that, so one more float32 matrix of its size is alive beside the gradient itself.
    return chunk + shape.vocab * shape.hidden * 4


def chunk_tokens(vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(1, vocab))


def pass_activation_bytes(shape: ModelShape, s: Settings, rows: int) -> int:
    """What a policy pass of `rows` completions keeps for its backward, counted from the tensors
    autograd saves (checked with saved-tensor hooks on the demo and the 0.5B-shaped model, LoRA,
    QLoRA and full: bench/README.md, `estimate.py`): per token and layer the layer's input, both
    norms' outputs, the residual after attention, queries, keys and values before and after the
    rotary embedding and the attention output with its contiguous copy (8H + 3 KV widths), the MLP's
    gate, up, activation and product (4I), and with LoRA each projection's rank-r intermediate (7r),
    without it about 4H more (the inputs the weight gradients need); in a half precision each norm's
    float32 copy and output (4H float32 a norm). Attention weights are not kept (the SDPA kernels
    save only their log-sum-exp). Per token and not per layer: the final hidden state and its
    gradient for the output layer (4H float32). A group's prompt runs once per pass (prompt
    sharing), so the tokens are rows × completion + groups × prompt. With gradient checkpointing
    each layer keeps only its input, plus one layer's worth while it is recomputed."""
    H, b = shape.hidden, s.dtype_bytes
    kv = shape.kv_heads * (H // max(1, shape.heads))
    per_layer = (8 * H + 3 * kv + 4 * shape.intermediate) * b
    per_layer += 7 * s.lora_r * b if s.lora else 4 * H * b
    if b < 4:
        per_layer += 2 * 4 * H * 4
    groups = -(-rows // max(1, s.G))
    tokens = rows * s.completion_tokens + groups * s.prompt_tokens
    kept = shape.layers * H * b + per_layer if s.checkpointing else shape.layers * per_layer
    return int(tokens * (kept + 4 * H * 4))


def row_bytes(shape: ModelShape, s: Settings) -> int:
    """memory.py's per-row figure, which the engine's micro-batch "auto" uses to choose."""
    return activation_bytes_per_row(
        shape,
        row_tokens(s.prompt_tokens, s.completion_tokens, s.G, s.checkpointing),
        s.dtype_bytes,
        lora_r=s.lora_r if s.lora else 0,
        checkpointing=s.checkpointing,
    )


def memory(shape: ModelShape, p: Params, s: Settings, dev: Device) -> dict:
    """The memory part of the estimate (bytes): the contract's keys plus the phases."""
    detail = weights_detail(p, s)
    weights = sum(detail.values())
    optim = optimizer_bytes(p, s)
    if dev.kind == "cpu":
        resident = CPU_BASELINE_BYTES + weights + optim
    else:
        resident = CUDA_WORKSPACE_BYTES + weights + optim + CUDA_CONTEXT_BYTES
    rows = pass_rows(shape, p, s, dev, resident)
    activations = pass_activation_bytes(shape, s, rows)
    logits = logits_bytes(shape, s, rows)
    kv = kv_cache_bytes(shape, s, dev.kind)
    other = sampling_other_bytes(shape, p, s, dev.kind)
    step = optimizer_step_bytes(shape, p, s, dev.kind)
    phases = {"training": activations + logits, "sampling": kv + other, "optimizer": step}
    peak = max(phases.values())
    dynamic = optim + peak
    # CPU: the process itself, bitsandbytes' runtime when quantized, and what the C heap keeps;
    # CUDA: the cuBLAS workspace, while the CUDA context and torch's cache (outside
    # max_memory_allocated) are `outside`, counted only when comparing with free memory.
    if dev.kind == "cpu":
        overhead = CPU_BASELINE_BYTES + int(CPU_ALLOCATOR_SHARE * dynamic)
        overhead += BNB_CPU_RUNTIME_BYTES if s.quant != "none" else 0
        outside = 0
    else:
        overhead = CUDA_WORKSPACE_BYTES
        outside = CUDA_CONTEXT_BYTES + int(CUDA_CACHE_SHARE * (weights + dynamic))
    total = overhead + weights + optim + peak
    return {
        "weights": weights,
        "adapters_optimizer": optim,
        "activations": activations,
        "logits": logits,
        "kv_cache": kv,
        "sampling_other": other,
        "optimizer_step": step,
        "overhead": overhead,
        "total": total,
        "outside_total": outside,
        "needed": total + outside,
        "peak_phase": max(phases, key=phases.get),
        "phases": phases,
        "weights_detail": detail,
        "rows_per_pass": rows,
    }
