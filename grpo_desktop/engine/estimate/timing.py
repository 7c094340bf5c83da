"""The time half of the estimate before Start: rough seconds of one GRPO step, by phase.

Decode is memory-bound (every token reads every weight: weight bytes / bandwidth) or
compute-bound (2 · parameters · rows FLOPs), plus a host overhead per token and layer; prefill
and training passes cost 2 · parameters FLOPs per token forward, twice that again for the
backward of full fine-tuning (LoRA's backward skips the frozen weights' gradients), the
reference pass when β > 0, a recomputation with gradient checkpointing; all divided by the
device's throughput (fit.py measures or reads it). The constants were fitted on an idle 2-core
CPU against bench/estimate.py's five shapes and bench/realistic.py's workload, phase by phase
(bench/README.md); the CUDA ones come from host-time measurements of an eager decode step and
are not yet checked on a GPU. Torch-free, like formulas.py.

On the CPU the throughput is measured in a fraction of a second, at one moment: another program
busy then makes every estimate of that session slower, and one busy now makes the run slower.
`seconds_range` turns the estimate into the range between the idle machine and the load now
(issue 27: the same settings read 2.5 s and 6.6 s a step at different moments), from
`machine_load`'s load average; while a run trains, `others_load` leaves its own threads out.

The estimate counts every completion at the full length and every row in the training passes.
A run's steps are often faster: answers end at EOS, a group's answers that begin alike run
their beginning once (sampling/twin_rows.py, sampling/packing.py), and with β = 0 a group whose
answers all scored the same is left out of the update (engine/grpo/step.py); the demo measures
about a third of its estimate.

Try it:  grpo-desktop estimate --demo  (its "Step" line)
"""

from __future__ import annotations

import os
from dataclasses import replace

from grpo_desktop.engine.estimate.formulas import (
    Device,
    Params,
    Settings,
    decoder_params,
    trainable,
    weights_detail,
)
from grpo_desktop.engine.estimate.memory import ModelShape

# Host work per decoded token and layer (CPU: in matmul FLOP-equivalents, so it scales with the
# measured rate; CUDA: seconds, from the eager decode step's host time; bench/README.md).
HOST_PER_TOKEN_LAYER = {"cpu": 5e7, "cuda": 0.8e-3}
# bitsandbytes' 4/8-bit layers per quantized weight: a decode step's few-row product through
# its slow CPU kernel, and a training pass's unpacking.
DECODE_QUANT_PER_WEIGHT = {"cpu": 300.0, "cuda": 0.0}
PASS_QUANT_PER_WEIGHT = {"cpu": 20.0, "cuda": 0.0}
# Bytes moved per logit and decoded token to choose the token (ops/draw.py: scaling, softmax and
# the draw; top-p's topk and masking, dearer as the distribution is flatter), as multiples of a
# copy's bandwidth.
SAMPLE_BYTES_PER_LOGIT = 30.0
TOP_P_BYTES_PER_LOGIT = 370.0
DECODE_SHARE = 0.36  # of the measured product rate, for a decode step's few-row CPU products
# The output layer's products in the training passes on the CPU (the fused head's chunks of ~110
# tokens against the whole vocabulary, with their log-softmax): this share of the measured rate.
HEAD_SHARE = 0.55
# AdamW's bytes moved per trainable weight (weights, gradients, two moments and the single-tensor
# update's temporaries).
OPTIMIZER_BYTES_PER_WEIGHT = 120.0
WIDE = 1024  # hidden size from which CPU products reach the measured rate


def seconds(shape: ModelShape, p: Params, s: Settings, dev: Device, rows: int) -> dict:
    """Rough seconds of one step by phase: sampling (prefill + decode) and training (reference,
    old-policy and policy passes, optimizer). On the CPU every term is work divided by the
    measured product rate, so a busy machine's estimate is slower too: narrow layers reach a
    smaller share of it (`width`), decode products of a few rows about a third (DECODE_SHARE),
    the output layer's training products about half (HEAD_SHARE), and the per-token host work
    and 4-bit unpacking are counted as product-equivalents; choosing each token is memory
    traffic over the logits (SAMPLE_BYTES_PER_LOGIT, more with top-p)."""
    flops = max(dev.flops, 1.0)
    cpu = dev.kind == "cpu"
    dec = decoder_params(p)
    head = shape.hidden * shape.vocab
    P, C, N = s.prompt_tokens, s.completion_tokens, s.rows
    T = P + C
    width = min(1.0, shape.hidden / WIDE) ** 0.5 if cpu else 1.0
    attn = 4 * shape.layers * shape.hidden  # FLOPs per token and position attended to
    host = HOST_PER_TOKEN_LAYER[dev.kind] * shape.layers  # per decoded token
    host = host / flops if cpu else host
    quantized = p.linear if s.quant != "none" else 0
    unpack = PASS_QUANT_PER_WEIGHT[dev.kind] * quantized  # per forward over the whole model
    unpack = unpack / flops if cpu else unpack
    unpack_token = DECODE_QUANT_PER_WEIGHT[dev.kind] * quantized
    unpack_token = unpack_token / flops if cpu else unpack_token
    # Sampling: the prompt once per group, then C decode steps over all N rows.
    prefill = (2 * dec * s.B * P / width + attn * s.B * P * P / 2) / flops + unpack
    weight_bytes = sum(weights_detail(p, replace(s, beta=0.0)).values())
    share = DECODE_SHARE if cpu else 1.0
    per_token_compute = (2 * (dec + head) * N + attn * N * T) / (flops * share * width)
    per_token_memory = weight_bytes / max(dev.bandwidth, 1.0)
    # Choosing each row's token: a few passes over its logits (softmax, the draw; top-p's
    # candidates), memory-bound on every device (engine/ops/draw.py).
    bytes_per_logit = SAMPLE_BYTES_PER_LOGIT + (TOP_P_BYTES_PER_LOGIT if s.top_p < 1.0 else 0)
    choose = bytes_per_logit * N * shape.vocab / max(dev.bandwidth, 1.0)
    per_token = max(per_token_compute, per_token_memory) + unpack_token + host + choose
    sampling = prefill + C * per_token
    # Training: token-passes with a group's prompt shared by its G rows.
    tokens = s.B * P + N * C
    passes = max(1, -(-N // max(rows, 1)))
    head_rate = HEAD_SHARE * width if cpu else 1.0
    forward = (
        2 * dec * tokens / width + 2 * head * N * C / head_rate + attn * N * T * T / 2
    ) / flops
    forward += unpack * passes
    backward = (1.0 if s.lora else 2.0) * forward
    if not s.lora:
        backward += 2 * head * N * C / (flops * head_rate)  # the fused head recomputes chunks
    if s.checkpointing:
        backward += forward
    extra = (s.beta > 0) + (s.num_iterations > 1)
    optimizer = trainable(p, s) * OPTIMIZER_BYTES_PER_WEIGHT / max(dev.bandwidth, 1.0)
    training = extra * forward + s.num_iterations * (forward + backward + optimizer)
    return {"sampling": float(sampling), "training": float(training)}


def machine_load() -> tuple[float, int] | None:
    """(the 1-minute load average, the number of cores), or None where the system keeps no load
    average (Windows)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
    return float(load), max(1, os.cpu_count() or 1)


def seconds_range(
    seconds: float, measured: tuple[float, int] | None, now: tuple[float, int] | None
) -> tuple[float, float]:
    """(on an idle machine, under the load `now`) for a CPU estimate of `seconds` whose speed
    was measured under the load `measured` (None: unknown, taken as idle). With L runnable
    programs on C cores the run's threads get about C / (C + L) of them: the idle time is
    seconds / (1 + L / C) for the load measured, and the time now that much longer again for
    the load now."""
    idle = seconds / (1 + measured[0] / measured[1]) if measured else seconds
    busy = idle * (1 + now[0] / now[1]) if now else idle
    return idle, max(busy, idle)


def others_load(load: tuple[float, int] | None, own: int) -> tuple[float, int] | None:
    """The load of the other programs while this process trains on `own` threads: the load
    average counts the run's own busy threads, and a range that took them for other programs
    showed the running demo 1.6–1.9 s a step where it measured 0.55 s (issue 28)."""
    if load is None:
        return None
    return max(0.0, load[0] - own), load[1]
