"""A lean autoregressive sampler: the decode loop of one GRPO step, without `generate`'s overhead.

transformers' `generate` runs a general pipeline (logits processors, stopping criteria, cache
bookkeeping) around every token; on small models that overhead dominates (bench/README.md has the
figures). `sample_tokens` does only what GRPO needs: temperature, top-p, greedy, EOS handling, and
positions taken from the attention mask so left-padded rows are sampled exactly as the loss pass
scores them. It prefills each distinct prompt once (a group's G rows share it, `_prefill`),
chooses its decode path once (`_decoder`: decoders.py's lean CPU step, fixed-shape CUDA-graph
step, or the model's forward) and on the CPU how many threads it runs on (decode_threads.py),
then per token: that path's step, the draw (engine/ops/draw.py), EOS bookkeeping, the stop
check; the lean CPU step drops the rows that ended once a quarter of the live ones have
(`_LiveRows`: the same tokens, tests/engine/sampling/test_live_rows.py), and runs the rows
of a group that have sampled the same tokens so far as one (twin_rows.py: the same tokens
again). `lora_merged` folds
LoRA adapters into their base weights for the decode, so each layer runs one matmul instead of
three. Models whose forward does not accept these arguments (some remote-code models) fall back
to `generate` in rollout.py.

Try it: tests/engine/sampling/test_sampler.py (the same tokens as `generate` when greedy).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import torch

from grpo_desktop.engine.ops.adapters import adapters_off
from grpo_desktop.engine.ops.draw import draw, nucleus
from grpo_desktop.engine.ops.fused_head import probs_entropy, sampling_entropy
from grpo_desktop.engine.ops.host_memory import DecodeTrim
from grpo_desktop.engine.ops.kernels import fast_linear
from grpo_desktop.engine.sampling.common_start import prompt_pass
from grpo_desktop.engine.sampling.decode import lean_decoder
from grpo_desktop.engine.sampling.decode_graph import GraphedDecode
from grpo_desktop.engine.sampling.decode_static import static_decoder
from grpo_desktop.engine.sampling.decode_threads import DecodeThreads, timed
from grpo_desktop.engine.sampling.decoders import (
    Decoder,
    ForwardDecode,
    LeanDecode,
    PrefillOnly,
    StaticDecode,
    out_cache,
)
from grpo_desktop.engine.sampling.twin_rows import TwinRows

DROP_SHARE = 0.25  # a CPU decode drops its ended rows once this share of its live rows ended
TWIN_ROWS = True  # the lean CPU step runs rows with the same prompt and tokens once (twin_rows.py)
SYNC_EVERY_CUDA = 8  # check "all rows finished" every k tokens on GPU (each check is a sync)
LEAN_DECODE = True  # Llama-family models on the CPU decode with decode.py (False: the forward)
# Where the fixed-shape step of decode_static.py (CUDA graphs on CUDA) decodes: "cuda", "always"
# (the CPU too: tests) or "never" (the model's forward on CUDA).
STATIC_DECODE = "cuda"
_last = {"path": "none"}


def last_decode_path() -> str:
    """How the last `sample_tokens` call decoded: "lean" (CPU), "static graph", "static eager",
    "static eager (fallback)" (capture failed or disagreed), "forward (static step disagreed)"
    (the first token's check against the forward failed), "forward", or "prefill only"."""
    return _last["path"]


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
    entropy: list | None = None,
    decode_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Completion ids (N, C) with C ≤ max_new_tokens; a row ends at its first `eos_id` (any of
    them when a list) and is padded with pad_id after it. `on_token(t, tokens)` is called with
    each step's tokens (N,) (pad for finished rows), for streaming; returning False stops the
    decode there (a cancel): the rows then end where they are, as if cut by the length limit.
    `entropy`: a list to append the (N, C) float32 entropies of the distributions each token
    was drawn from (softmax of logits / temperature, before top-p and before min_new_tokens
    holds EOS back: what the log-prob pass's entropy measures) to; after a row's end they mean
    nothing (generate_completions zeroes them with the completion mask). `decode_dtype`: the
    lean CPU decode's products on weights rounded to it (bfloat16 sampling, precision.py); the
    prefill, and so each row's first token, stays exact."""
    N = prompt_ids.size(0)
    device = prompt_ids.device
    stops = torch.tensor([eos_id] if isinstance(eos_id, int) else eos_id, device=device)  # (S,)
    attention = prompt_mask.clone()  # (N, P)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (N, P)
    # Not around the decode loop: the mode would see each of its many small ops; the lean
    # decoder picks its products itself (kernels.product_for).
    runs = prompt_runs(prompt_ids, attention)  # the rows that repeat a prompt, or None
    with fast_linear(device):
        logits, cache, copied = _prefill_runs(model, prompt_ids, attention, positions, runs)
    decoder = _decoder(model, cache, attention, positions, max_new_tokens, decode_dtype)
    if copied is not None:  # a run's rows read one copy of their prompt's keys and values
        decoder.share_prompts(copied)
    del cache  # the decoder holds what it needs of the prefill's keys and values
    # Rows with the same prompt and the same tokens so far are stepped once (twin_rows.py).
    twins = None
    if TWIN_ROWS and runs is not None and isinstance(decoder, LeanDecode):
        twins = TwinRows(decoder, *runs)
    positions = positions[:, -1:] + 1  # (N, 1) of the first new token
    finished = torch.zeros(N, dtype=torch.bool, device=device)  # (N,)
    # The tokens go into one buffer: a tensor kept per token would be a small block outliving
    # its step, which glibc may cut from a freed (N, V) block and so fragment the heap.
    tokens = torch.full((N, max(1, max_new_tokens)), pad_id, dtype=torch.long, device=device)
    entropies = None
    if entropy is not None:
        entropies = torch.zeros(tokens.shape, dtype=torch.float32, device=device)  # (N, C)
    sampled = 0
    # A large vocabulary's per-step logits fragment the C heap: give its free pages back now
    # and then (engine/ops/host_memory.py; never on the demo's vocabulary).
    trim = DecodeTrim(device.type, logits.numel() * 4)
    # On the CPU, one thread or all, whichever steps faster (decode_threads.py: the same tokens).
    threads = DecodeThreads(device, max_new_tokens)
    live = _LiveRows(N)  # which rows the decoder still steps (finished ones dropped)
    try:
        for t in range(max_new_tokens):  # logits: the prefill's, then each step's
            if twins is not None and t > 0:
                logits = twins.rows(logits)  # (D, V) of the decoder's rows -> (K, V)
            logits = logits.float()  # (K, V) of the K rows still stepped
            # The entropy before EOS is held back: from the draw's own softmax when that is the
            # whole distribution at the temperature, else worked out on its own.
            shared = entropies is not None and not greedy and top_p >= 1.0 and t >= min_new_tokens
            entropy_now = None
            if entropies is not None:
                entropy_now = live.column(entropies, t)  # (K,) a view until rows are dropped
                if not shared:
                    entropy_now.copy_(sampling_entropy(logits, temperature))
            if t < min_new_tokens:
                logits[:, stops] = float("-inf")
            nxt = _next_tokens(
                logits, greedy, temperature, top_p, entropy_now if shared else None, live.draws
            )  # (K,)
            nxt = nxt.masked_fill(finished, pad_id)  # (K,) finished rows get padding
            live.put(tokens, t, nxt)
            if entropy_now is not None and live.index is not None:  # a copy: write it back
                live.put(entropies, t, entropy_now)
            sampled = t + 1
            finished |= torch.isin(nxt, stops)
            trim.tick(t)
            if on_token is not None and on_token(t, tokens[:, t]) is False:
                break  # a cancel: the rows end where they are
            if t == max_new_tokens - 1:
                break
            if (device.type != "cuda" or t % SYNC_EVERY_CUDA == 0) and bool(finished.all()):
                break  # every row ended (on CUDA looked at every SYNC_EVERY_CUDA tokens)
            if live.droppable and device.type != "cuda" and live.worth_dropping(finished):
                kept = torch.nonzero(~finished).flatten()  # (K',) of the K rows
                if twins is not None:  # the decoder's rows follow the twins' slots
                    twins.keep_rows(kept)
                else:
                    live.droppable = decoder.keep(kept)  # False: this path keeps every row
                if live.droppable:
                    live.keep(kept)
                    finished, nxt, positions = finished[kept], nxt[kept], positions[kept]
            stepped = nxt if twins is None else twins.advance(nxt, finished)  # (D,) or None
            if stepped is None:  # every row has a history of its own: no twins from here on
                twins, stepped = None, nxt  # (K,)
            threads.before(t, stepped.size(0))
            logits, seconds = timed(decoder.step, stepped, positions)  # (K or D, V) next token
            threads.after(t, seconds)
            positions = positions + 1  # (K, 1)
    finally:
        logits = None  # may be the graph's output, in its memory pool
        decoder.close()  # a graph's pool goes back to the driver for the training pass
        threads.close()
        trim.done()
    _last["path"] = decoder.name
    if entropies is not None:
        entropy.append(entropies[:, :sampled].contiguous())  # (N, C)
    return tokens[:, :sampled].contiguous()  # (N, C)


def _next_tokens(
    logits: torch.Tensor,
    greedy: bool,
    temperature: float,
    top_p: float,
    entropy: torch.Tensor | None = None,
    rows: tuple[torch.Tensor, int] | None = None,
):
    """One token per row (N,) from float32 logits (N, V): the most likely one when `greedy`,
    else a draw from the softmax of logits / temperature, cut to its top-p nucleus. `entropy`
    (N,), when given, receives that softmax's entropy (only with top_p 1: the whole
    distribution). `rows`: which rows of the sampler's whole batch these are (draw.py's)."""
    if greedy:
        return logits.argmax(dim=-1)  # (N,)
    if temperature != 1.0:  # dividing by 1 changes no bit: one operation per token spared
        logits = logits / temperature
    if top_p < 1.0:
        logits = nucleus(logits, top_p)  # (N, V)
    probs = torch.softmax(logits, dim=-1)  # (N, V)
    if entropy is not None:
        probs_entropy(probs, entropy)  # (N,) −Σ p log p
    return _draw(probs, rows)  # (N,)


def _draw(probs: torch.Tensor, rows: tuple[torch.Tensor, int] | None = None) -> torch.Tensor:
    """One token per row (N,) from probs (N, V): engine/ops/draw.py's two-level inverse CDF on the
    CPU (torch.multinomial there costs more than the output layer at a 150k vocabulary; a
    vocabulary of one block in one call of the fused kernels), multinomial's GPU kernel on CUDA
    (whose decoders keep every row: `rows` is None there)."""
    if probs.device.type == "cuda":
        return torch.multinomial(probs, 1).squeeze(1)
    return draw(probs, rows=rows)


class _LiveRows:
    """The rows a CPU decode still steps. Once DROP_SHARE of them have ended, the decoder (where
    it can: decoders.py's `keep`) goes on with the others only, so a step costs what its live
    rows need; the ended ones only get padding from then on. Each kept row keeps its numbers,
    and its draws the random numbers of the whole batch (draw.py), so it samples the tokens it
    would have sampled beside the others."""

    def __init__(self, N: int) -> None:
        self.N = N
        self.index: torch.Tensor | None = None  # (K,) the live rows' indices; None: all N
        self.droppable = True  # until the decoder says it cannot drop rows

    @property
    def draws(self) -> tuple[torch.Tensor, int] | None:
        return None if self.index is None else (self.index, self.N)

    def column(self, buffer: torch.Tensor, t: int) -> torch.Tensor:
        """Column t of an (N, C) buffer for the live rows (K,): a view while all N are live."""
        return buffer[:, t] if self.index is None else buffer[self.index, t]

    def put(self, buffer: torch.Tensor, t: int, values: torch.Tensor) -> None:
        """Column t of `buffer` (N, C) gets `values` (K,) in the live rows."""
        if self.index is None:
            buffer[:, t] = values
        else:
            buffer[self.index, t] = values

    def worth_dropping(self, finished: torch.Tensor) -> bool:
        """Whether enough of the K live rows have ended (finished (K,)) to drop them now."""
        ended = int(finished.sum())
        return ended > 0 and ended >= DROP_SHARE * finished.numel()

    def keep(self, kept: torch.Tensor) -> None:
        """Only rows `kept` (K',) of the K live ones stay live."""
        self.index = kept if self.index is None else self.index.index_select(0, kept)


def _decoder(
    model, cache, attention, positions, max_new_tokens: int, dtype: torch.dtype | None = None
) -> Decoder:
    """This call's decode path (decoders.py), continuing from the prefill's `cache` and the
    prompts' `attention` and `positions` (N, P): the fixed-shape step where STATIC_DECODE asks
    for it (with a CUDA graph on CUDA), else the lean CPU step where LEAN_DECODE allows, else the
    model's forward; each only for models it runs exactly. Read per call: tests switch them."""
    if max_new_tokens <= 1:
        return PrefillOnly()
    capacity = attention.size(1) + max_new_tokens  # positions the decoders' buffers hold
    device = attention.device
    if STATIC_DECODE != "never" and (STATIC_DECODE != "cuda" or device.type == "cuda"):
        static = static_decoder(model, cache, capacity, attention, positions)
        if static is not None:
            return StaticDecode(model, GraphedDecode(static), cache, attention)
    if LEAN_DECODE:
        lean = lean_decoder(model, cache, capacity, dtype)
        if lean is not None:
            # the prefill's keys and values copied into it; the first new token's positions
            return LeanDecode(lean, attention, positions[:, -1:] + 1)
    return ForwardDecode(model, cache, attention)


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
    indexing of `batch_select_indices` costs a slower index_put with accumulation."""
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


_FIND = object()  # _prefill's `runs` when the caller has not looked for them


def _prefill(model, prompt_ids, attention, positions, runs=_FIND):
    """Run the prompts, each distinct one once (a group's G rows share it: `runs`, prompt_runs'
    answer, found here unless given), and copy its keys and values to the rows that repeat it.
    Returns the last position's logits (N, V) and the cache."""
    logits, cache, _ = _prefill_runs(model, prompt_ids, attention, positions, runs)
    return logits, cache


def _prefill_runs(model, prompt_ids, attention, positions, runs=_FIND):
    """`_prefill`'s (logits, cache) and the run of each row (N,) when rows of a run got copies of
    one prompt's keys and values (the same numbers), else None."""
    if runs is _FIND:
        runs = prompt_runs(prompt_ids, attention)
    if runs is not None:
        first, owner = runs  # (U,), (N,)
        logits, cache = _prefill_distinct(
            model, prompt_ids[first], attention[first], positions[first]
        )  # (U, V)
        if expand_rows(cache, owner):  # (U, ...) -> (N, ...) per layer
            return logits[owner], cache, owner
    return (*_prefill_distinct(model, prompt_ids, attention, positions), None)


def _prefill_distinct(model, prompt_ids, attention, positions):
    """The prefill of distinct prompts: (logits (N, V) of their last position, cache). Their
    common beginning (a system prompt, a chat template's header) runs once when it is long
    enough to matter (`_prefill_common_start`), else every row runs whole."""
    shared = _prefill_common_start(model, prompt_ids, attention, positions)
    if shared is not None:
        return shared
    out = model(
        input_ids=prompt_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1, :], out_cache(out)


def _prefill_common_start(model, prompt_ids, attention, positions):
    """(logits (N, V), cache) with the prompts' common beginning run once (common_start.py:
    the demo's held-out prompts share 83 of their 93 tokens), or None when too little is shared
    or the cache does not allow it (then the plain prefill runs)."""
    shared = prompt_pass(model, prompt_ids, attention, positions, logits_to_keep=1)
    if shared is None:
        return None
    out, cache = shared
    return out.logits[:, -1, :], cache


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
    if "peft" not in sys.modules:  # no peft model before peft is imported: spare its slow import
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


def _merged(layer, weight: torch.Tensor) -> torch.Tensor:
    """A new tensor W + scale·B·A (out, in) of a LoRA layer's base weight W: for float32 weights
    and adapters one `addmm` (the product's scaling and the sum in the library's one pass, no
    (out, in) delta tensor made first), else peft's delta in float32 added and rounded back."""
    name = layer.active_adapters[0]
    A, B = layer.lora_A[name].weight, layer.lora_B[name].weight  # (r, in), (out, r)
    plain = not getattr(layer, "fan_in_fan_out", False)
    if plain and weight.dtype == A.dtype == B.dtype == torch.float32:
        return torch.addmm(weight, B, A, alpha=layer.scaling[name])  # (out, in)
    delta = layer.get_delta_weight(name)  # (out, in)
    return (weight.float() + delta.float()).to(weight.dtype)


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
                originals.append((weight, weight.data))
                weight.data = _merged(layer, weight.data)  # (out, in)
        with adapters_off(model):
            yield
    finally:
        for weight, data in originals:
            weight.data = data
