"""A lean autoregressive sampler: the decode loop of one GRPO step, without `generate`'s overhead.

transformers' `generate` runs a general pipeline (logits processors, stopping criteria, cache
bookkeeping) around every token; on small models that overhead dominates — measured here on a 3M
Llama, 32 rows × 128 tokens on 2 CPU cores: 4.2 s with `generate`, 0.6 s with this loop. It does
only what GRPO needs: temperature, top-p, greedy, EOS handling, and positions taken from the
attention mask so left-padded rows are sampled exactly as the loss pass scores them.

Two savings on GRPO's batches, where each prompt is repeated G times: the prompt of a group is
prefilled once and its keys and values copied to the group's rows (`_prefill`), and with LoRA on
float32 CPU weights `lora_merged` folds each adapter into its base weight for the decode, so every
layer runs one matmul instead of three (the weights are restored exactly afterwards). Measured on
the 3M benchmark model, 32 rows × 64 tokens, one thread: 0.53 → 0.40 CPU-s per generation.

Llama and Qwen2 models on the CPU then decode through `engine/sampling/decode.py` (the same modules
without transformers' per-call machinery; others call the model). Float32 CPU products run in
oneDNN where it is faster than MKL (`engine/ops/kernels.py`). Models whose forward does not
accept these arguments (some remote-code models) fall back to `generate` in rollout.py.

On CUDA, where a decode step costs host time rather than arithmetic (the eager forward of a
24-layer LoRA model dispatches ~3,600 operations per token), the same models decode through the
fixed-shape step of `engine/sampling/decode_static.py`, captured once per call as a CUDA graph and
replayed per token (`engine/sampling/decode_graph.py`: checked against the eager step on the first two
tokens, eager when capture fails; `decode_graph.GRAPHS` switches graphs off, STATIC_DECODE the
step). The static step's first token is checked against the model's own forward (one forward
step per call; when they disagree the forward decodes, `_first_static_token`). `lora_merged`
folds bf16/fp16 LoRA layers there too. Sampling (temperature, top-p, the draw, EOS) stays in
this loop on every path, with engine/ops/draw.py's draw and top-p (on the CPU, torch.multinomial and
the full sort took 150 and 420 ms a token at a 150k vocabulary). `last_decode_path()` says which
path ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Callable, Iterator

import torch

from grpo_desktop.engine.ops.draw import draw, nucleus
from grpo_desktop.engine.ops.host_memory import DecodeTrim
from grpo_desktop.engine.ops.kernels import fast_linear
from grpo_desktop.engine.sampling.decode import lean_decoder
from grpo_desktop.engine.sampling.decode_graph import GraphedDecode
from grpo_desktop.engine.sampling.decode_static import static_decoder

SYNC_EVERY_CUDA = 8  # check "all rows finished" every k tokens on GPU (each check is a sync)
LEAN_DECODE = (
    True  # decode Llama-family models with engine/sampling/decode.py (False: the model's forward)
)
# Where the fixed-shape step of engine/sampling/decode_static.py (CUDA graphs on CUDA) decodes: "cuda",
# "always" (the CPU too: tests) or "never" (the model's forward on CUDA).
STATIC_DECODE = "cuda"
FORWARD_TOLERANCE = 0.05  # static step vs the model's forward on the first token, of the scale
log = logging.getLogger(__name__)
_last = {"path": "none"}


def last_decode_path() -> str:
    """How the last `sample_tokens` call decoded: "lean" (CPU), "static graph", "static eager",
    "static eager (fallback)" (capture failed or disagreed), "forward (static step disagreed)"
    (the first token's check against the forward failed), "forward", or "prefill only"."""
    return _last["path"]


def _cache_keyword() -> str:
    """The name of the key/value cache in a forward call and its output: transformers 5 calls it
    `cache` (and warns that `past_key_values` goes away in 5.40); earlier releases only know
    `past_key_values`."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    names = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


CACHE = _cache_keyword()


def out_cache(out):
    """The key/value cache a forward call returned (None when it returned none)."""
    return getattr(out, CACHE, None)


@torch.no_grad()
def sample_tokens(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_id: int | list[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    min_new_tokens: int = 0,
    on_token: Callable[[int, torch.Tensor], bool | None] | None = None,
) -> torch.Tensor:
    """Completion ids (N, C) with C ≤ max_new_tokens; a row ends at its first `eos_id` (any of
    them when a list) and is padded with pad_id after it. `on_token(t, tokens)` is called with
    each step's tokens (N,) (pad for finished rows), for streaming; returning False stops the
    decode there (a cancel): the rows then end where they are, as if cut by the length limit."""
    N = prompt_ids.size(0)
    device = prompt_ids.device
    stops = torch.tensor([eos_id] if isinstance(eos_id, int) else eos_id, device=device)  # (S,)
    attention = prompt_mask.clone()  # (N, P)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (N, P)
    # Not around the decode loop: the mode would see each of its many small ops; the lean
    # decoder picks its products itself (kernels.product_for).
    with fast_linear(device):
        last_logits, cache = _prefill(model, prompt_ids, attention, positions)  # (N, V)
    capacity = prompt_ids.size(1) + max_new_tokens
    static = _static(model, cache, capacity, attention, positions) if max_new_tokens > 1 else None
    decode = None
    if static is None and LEAN_DECODE:
        decode = lean_decoder(model, cache, capacity)
    if decode is not None:
        cache = None  # the decoder copied the keys and values into its own buffers
    checked = static is None  # the static step's first token is checked against the forward
    static_failed = False
    next_pos = positions[:, -1:] + 1  # (N, 1)
    finished = torch.zeros(N, dtype=torch.bool, device=device)  # (N,)
    ones = torch.ones(N, 1, dtype=attention.dtype, device=device)  # (N, 1)
    # The tokens go into one buffer: a tensor kept per token would be a small block outliving
    # its step, which glibc may cut from a freed (N, V) block and so fragment the heap.
    tokens = torch.full((N, max(1, max_new_tokens)), pad_id, dtype=torch.long, device=device)
    sampled = 0
    # A large vocabulary's per-step logits fragment the C heap: give its free pages back now
    # and then (engine/ops/host_memory.py; never on the demo's vocabulary).
    trim = DecodeTrim(device.type, last_logits.numel() * 4)
    try:
        for t in range(max_new_tokens):
            logits = last_logits.float()  # (N, V)
            if t < min_new_tokens:
                logits[:, stops] = float("-inf")
            if greedy:
                nxt = logits.argmax(dim=-1)  # (N,)
            else:
                logits = logits / temperature
                if top_p < 1.0:
                    logits = nucleus(logits, top_p)  # (N, V)
                nxt = _draw(torch.softmax(logits, dim=-1))  # (N,)
            nxt = nxt.masked_fill(finished, pad_id)
            tokens[:, t] = nxt
            sampled = t + 1
            finished |= torch.isin(nxt, stops)
            trim.tick(t)
            if on_token is not None and on_token(t, nxt) is False:
                break
            if t == max_new_tokens - 1:
                break
            if (device.type != "cuda" or t % SYNC_EVERY_CUDA == 0) and bool(finished.all()):
                break
            if static is not None and checked:
                last_logits = static(nxt)  # (N, V) fixed shapes: no mask or positions to grow
                continue
            if static is not None:
                checked = True
                attention = torch.cat([attention, ones], dim=1)  # (N, P + 1)
                ours, out = _first_static_token(model, static, cache, nxt, attention, next_pos)
                cache = None if ours is not None else out_cache(out)
                if ours is not None:
                    last_logits = ours  # (N, V)
                    continue
                static.close()
                static, last_logits = None, out.logits[:, -1, :]  # (N, V) on with the forward
                static_failed = True
                next_pos = next_pos + 1
                continue
            attention = torch.cat([attention, ones], dim=1)  # (N, P + t + 1)
            if decode is not None:
                last_logits = decode(nxt, attention, next_pos)  # (N, V)
            else:
                with fast_linear(device):
                    out = model(
                        input_ids=nxt.unsqueeze(1),
                        attention_mask=attention,
                        position_ids=next_pos,
                        use_cache=True,
                        **{CACHE: cache},
                    )
                cache = out_cache(out)
                last_logits = out.logits[:, -1, :]  # (N, V)
            next_pos = next_pos + 1
    finally:
        if static is not None:
            last_logits = logits = None  # may be the graph's output, in its memory pool
            static.close()  # the pool goes back to the driver for the training pass
        trim.done()
    _last["path"] = _path_name(static, decode, max_new_tokens, static_failed)
    return tokens[:, :sampled].contiguous()  # (N, C)


def _draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row (N,) from probs (N, V): engine/ops/draw.py's two-level inverse CDF on the
    CPU (torch.multinomial there costs more than the output layer at a 150k vocabulary),
    multinomial's GPU kernel on CUDA."""
    if probs.device.type == "cuda":
        return torch.multinomial(probs, 1).squeeze(1)
    return draw(probs)


def _static(model, cache, capacity, attention, positions) -> GraphedDecode | None:
    """The fixed-shape decode step (with a CUDA graph on CUDA) where STATIC_DECODE asks for it
    and the model is one it runs exactly; else None."""
    device = attention.device
    if STATIC_DECODE == "never" or (STATIC_DECODE == "cuda" and device.type != "cuda"):
        return None
    decoder = static_decoder(model, cache, capacity, attention, positions)
    if decoder is None:
        return None
    return GraphedDecode(decoder)


def _first_static_token(model, static: GraphedDecode, cache, nxt, attention, positions):
    """The static step's first token, checked against the model's own forward on the same
    token (one forward step per call, on the prefill's cache, which it extends): (the static
    logits (N, V), the forward's output) when they agree within FORWARD_TOLERANCE of the
    logits' scale, else (None, the forward's output) after one warning, and the sampler goes on
    with the forward. A safety net for models and devices the tests could not cover (the CPU
    tests hold the two to 1e-5 in float32); bf16 kernels differ by far less than it."""
    out = model(
        input_ids=nxt.unsqueeze(1),
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        **{CACHE: cache},
    )
    reference = out.logits[:, -1, :]  # (N, V)
    try:
        ours = static(nxt)  # (N, V)
        scale = reference.float().abs().max().clamp(min=1.0)  # ()
        difference = float((ours.float() - reference.float()).abs().max() / scale)
        reason = f"differs from the model's forward by {difference:.3g} of the logits' scale"
        if torch.isfinite(ours).all() and difference <= FORWARD_TOLERANCE:
            return ours, out
    except Exception as exc:  # any failure of the static step: the forward goes on
        reason = f"failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    log.warning("The fixed-shape decode step %s; decoding with the model's forward", reason)
    return None, out


def _path_name(static, lean, max_new_tokens: int, static_failed: bool = False) -> str:
    if max_new_tokens <= 1:
        return "prefill only"
    if static_failed:
        return "forward (static step disagreed)"
    if static is not None:
        return "static " + static.mode if static.mode != "graph" else "static graph"
    return "lean" if lean is not None else "forward"


def prompt_runs(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
    """Rows repeating the row above (same prompt, as the G rows of a group): (first row of each
    run (U,), run index of every row (N,)), or None when no row repeats."""
    if prompt_ids.size(0) < 2:
        return None
    new = torch.ones(prompt_ids.size(0), dtype=torch.bool, device=prompt_ids.device)  # (N,)
    same_ids = (prompt_ids[1:] == prompt_ids[:-1]).all(1)  # (N - 1,)
    new[1:] = ~(same_ids & (prompt_mask[1:] == prompt_mask[:-1]).all(1))
    if bool(new.all()):
        return None
    return torch.nonzero(new).squeeze(1), new.long().cumsum(0) - 1  # (U,), (N,)


def expand_rows(cache, owner: torch.Tensor) -> bool:
    """Give row i of every layer's keys and values those of prompt run owner[i] (U -> N rows).
    False when the cache offers no way to do it. Uses index_select where the cache exposes its
    tensors: in the policy's backward pass its gradient is an index_add, where the advanced
    indexing of `batch_select_indices` costs an index_put with accumulation, about 3 ms per
    layer and tensor on the 25M benchmark model."""
    layers = getattr(cache, "layers", None)
    if layers is not None and all(hasattr(x, "keys") and hasattr(x, "values") for x in layers):
        for layer in layers:
            if layer.keys is not None and layer.keys.dim() == 4:
                layer.keys = layer.keys.index_select(0, owner)  # (N, Hkv, P, D)
                layer.values = layer.values.index_select(0, owner)
        return True
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(owner)
        return True
    return False


def _prefill(model, prompt_ids, attention, positions):
    """Run the prompts, each distinct one once (a group's G rows share it), and copy its keys and
    values to the rows that repeat it. Returns the last position's logits (N, V) and the cache."""
    runs = prompt_runs(prompt_ids, attention)
    if runs is not None:
        first, owner = runs  # (U,), (N,)
        out = model(
            input_ids=prompt_ids[first],
            attention_mask=attention[first],
            position_ids=positions[first],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out_cache(out)
        if expand_rows(cache, owner):  # (U, ...) -> (N, ...) per layer
            return out.logits[owner, -1, :], cache
    out = model(
        input_ids=prompt_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1, :], out_cache(out)


HALF = (torch.float16, torch.bfloat16)
MERGE_SHARE = 0.5  # on a GPU, merged copies may take this share of the free memory, else unmerged


def _foldable(weight: torch.Tensor, half: bool) -> bool:
    """A base weight `lora_merged` folds: float32 on the CPU; half precision where `half`."""
    if weight.dtype == torch.float32 and weight.device.type == "cpu":
        return True
    return half and weight.dtype in HALF


def _mergeable_lora_layers(model, half: bool = False) -> list:
    """The LoRA layers of a peft model when every one of them can be folded into its nn.Linear
    (one active adapter, no DoRA, no LoRA bias, not merged already; a float32 CPU weight, or a
    float16/bfloat16 one when `half`); else []. 4-bit and 8-bit bases cannot be folded."""
    if "peft" not in sys.modules:  # no peft model before peft is imported: spare its 2-3 s import
        return []
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return []
    if not isinstance(model, PeftModel):
        return []
    layers = []
    for module in model.modules():
        if isinstance(module, LoraLayer):
            layers.append(module)
        elif (
            isinstance(module, BaseTunerLayer)
            or "ModulesToSave" in type(module).__name__
            or "TrainableTokens" in type(module).__name__
        ):
            return []  # disabling adapters would also switch these off: not the same function
    for layer in layers:
        names = layer.active_adapters
        name = names[0] if len(names) == 1 else None
        if (
            name is None
            or name not in layer.lora_A
            or type(layer.base_layer) is not torch.nn.Linear
            or not _foldable(layer.base_layer.weight, half)
            or layer.merged
            or layer.disable_adapters
            or layer.use_dora.get(name, False)
            or getattr(layer, "lora_bias", {}).get(name, False)
        ):
            return []
    return layers


def _room_to_merge(weights: list[torch.Tensor]) -> bool:
    """Whether the merged copies of `weights` fit: always on the CPU; on a GPU when they take at
    most MERGE_SHARE of its free memory (torch's unused cache included). Short of that the
    adapters stay unmerged: with the decode step in a CUDA graph their two extra small products
    per layer cost little, where copying the originals out and back would cost a transfer of
    every adapted weight per step."""
    device = weights[0].device
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return sum(w.numel() * w.element_size() for w in weights) <= MERGE_SHARE * free


@contextlib.contextmanager
def lora_merged(model, *, half: bool | None = None) -> Iterator[None]:
    """For generation: each LoRA layer's base weight temporarily holds W + scale·B·A and the
    adapters are off, so a decode step runs one matmul per layer instead of three. Folded: float32
    CPU weights, and float16/bfloat16 ones on CUDA (`half=None`; True folds them anywhere, for
    tests) when the merged copies fit (`_room_to_merge`). Half precision rounds once, W + ΔW
    computed in float32: the sampled distribution then differs from the scored one by that
    rounding (as when TRL hands merged weights to vLLM); on the CPU bf16 layers stay unmerged.
    The merged values are new tensors; the original ones are kept and put back on exit, bit for
    bit in the same storage (no subtraction), also after an error. Models it cannot merge
    wholly (4-bit, 8-bit, DoRA ...) run unchanged."""
    if half is None:  # half-precision weights are folded on CUDA only
        half = any(p.device.type == "cuda" for p in model.parameters())
    layers = _mergeable_lora_layers(model, half=half)
    if not layers or not _room_to_merge([layer.base_layer.weight for layer in layers]):
        yield
        return
    originals = []  # (parameter, its original tensor)
    try:
        with torch.no_grad():
            for layer in layers:
                weight = layer.base_layer.weight
                delta = layer.get_delta_weight(layer.active_adapters[0])  # (out, in)
                originals.append((weight, weight.data))
                weight.data = (weight.data.float() + delta.float()).to(weight.dtype)  # (out, in)
                del delta
        with model.disable_adapter():
            yield
    finally:
        for weight, data in originals:
            weight.data = data
