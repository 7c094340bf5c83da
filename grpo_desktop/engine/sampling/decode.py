"""One decode step of a Llama-family model on the CPU, without transformers' per-call machinery.

Through the model's own `forward`, each one-token step also builds a causal mask, goes through
every module's hooks and output capture, and grows the key/value cache by concatenation (a copy
of the whole cache per token); on the small models this app trains on a CPU, that bookkeeping
costs as much as the arithmetic (bench/README.md, "Where the speed comes from"). `LeanDecoder`
runs the same computation on the model's weights with as few torch calls as it can (issue 28:
141 a token on the demo against the modules' 305; bench/decode_floor.py): q/k/v and gate/up as
one product each, torch's one-call RMSNorm, the model's rotary embedding for every position of
the decode at once, keys and values written in place into buffers sized for the whole
completion: the forward's logits up to float rounding, the same bits per step. It covers what it
can check: Llama and Qwen2 on the CPU, every layer full attention, each projection a plain
`nn.Linear` (LoRA only while `lora_merged` has folded it), no hooks; for anything else
`lean_decoder` returns None and the sampler calls the model. CUDA uses decode_static.py.
Where ops/native.py's fused kernels are built, a float32 decoder runs its rotary embedding,
key/value writes and attention, SwiGLU's gate and its matrix products through them: the same
keys and values, the logits within float rounding of torch's operations (`LeanDecoder.native`);
with 8 rows or more a thread, the whole step is one call of them (`decode_step`: no barrier
between operations, each row's work in one core's cache, a group's rows reading one copy of
their prompt's keys and values), the same bits as the script's calls one by one.

Try it: tests/engine/sampling/test_decode.py and test_decode_lean_step.py (its logits and
tokens against the forward's, its torch calls per token).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import native
from grpo_desktop.engine.ops.host_memory import release_free_heap
from grpo_desktop.engine.ops.kernels import _plain_f32_cpu, product_for
from grpo_desktop.engine.sampling import decode_script

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
SCRIPTED = True  # run the layers through decode_script.py where it covers the model (tests: False)
NATIVE = True  # use ops/native.py's fused kernels where they are built (tests: False for torch's)
# with them, the whole step in one call where it can (tests: False for the script's step)
WHOLE_STEP = True
# Rows per thread from which the whole step is faster: each of its threads reads every weight
# (the script's products split them), which fewer rows do not repay (bench/README.md, session 30)
WHOLE_MIN_ROWS = 8
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def _base_model(model):
    """The transformers model under a peft wrapper (or the model itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _plain_linear(module):
    """The nn.Linear that computes `module`: itself, or the base layer of a LoRA layer whose
    adapters are off (`lora_merged` folded them into the base weight); else None."""
    if type(module) is torch.nn.Linear:
        return module
    base = getattr(module, "base_layer", None)
    if type(base) is torch.nn.Linear and getattr(module, "disable_adapters", False):
        return base
    return None


def _hooked(module) -> bool:
    """Whether calling around `module` would skip hooks that change what it computes. Not
    counted: transformers' `enable_input_require_grads` hook, which gradient checkpointing puts
    on the input embedding and which only marks its output as requiring gradients (nothing,
    under the sampler's no_grad)."""
    hooks = [
        h
        for h in module._forward_hooks.values()
        if getattr(h, "__name__", "") != "make_inputs_require_grads"
    ]
    return bool(hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook"))


def _cache_tensors(cache, layer: int):
    """(keys, values) of one layer of a transformers cache, each (N, Hkv, P, D), or None."""
    layers = getattr(cache, "layers", None)
    if layers is not None and layer < len(layers):
        entry = layers[layer]
        return getattr(entry, "keys", None), getattr(entry, "values", None)
    keys = getattr(cache, "key_cache", None)  # transformers 4.x DynamicCache
    values = getattr(cache, "value_cache", None)
    if keys is not None and values is not None and layer < len(keys):
        return keys[layer], values[layer]
    return None


class _Layer:
    """The modules of one decoder layer that a decode step calls."""

    def __init__(self, layer) -> None:
        attn = layer.self_attn
        self.input_norm = layer.input_layernorm
        self.q, self.k, self.v, self.o = (_plain_linear(getattr(attn, n)) for n in PROJECTIONS)
        self.post_norm = layer.post_attention_layernorm
        self.gate, self.up, self.down = (_plain_linear(getattr(layer.mlp, n)) for n in MLP)
        self.act = layer.mlp.act_fn
        self.scaling = attn.scaling
        self.modules = [layer, attn, layer.mlp, self.input_norm, self.post_norm]
        self.linears = [self.q, self.k, self.v, self.o, self.gate, self.up, self.down]
        self.extra = hasattr(attn, "q_norm") or hasattr(attn, "k_norm")  # Qwen3-style: not ours


JOIN_LIMIT = 64 * 2**20  # bytes of weight copies a decode may make to join products (demo: 4 MB)


def _joined(linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (sum of outs, in) and bias for several nn.Linear of one input: a product of
    the joined weight computes each part's output column by column as its own product does (the
    tests hold the tokens to the forward's), in one call instead of several. A copy: the
    training step may change the weights after this call."""
    weight = torch.cat([lin.weight for lin in linears])  # (out, in)
    return weight, _joined_bias(linears)


def _joined_bias(linears) -> torch.Tensor | None:
    """The biases of `linears` side by side (sum of outs,), zeros for those without; None when
    none has one."""
    if all(lin.bias is None for lin in linears):
        return None
    biases = [
        lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.weight.size(0))
        for lin in linears
    ]
    return torch.cat(biases)  # (out,)


class _Rounding:
    """bfloat16 sampling's copies of the weights (sampling/precision.py), all in one buffer: one
    allocation of the model's size, served from its own mapping (over the mmap threshold
    engine/ops/host_memory.py pins) and given back whole when the decode ends. LeanDecoder trims
    the heap's free pages before making it: else its fresh pages add to the free heap the last
    update left resident. SmolLM2-135M's peak RSS over a 3-step run: separate copies +690 MB,
    one buffer +570 MB, one buffer after the trim +250 MB (the copy itself, 270 MB)."""

    def __init__(self, dtype: torch.dtype, linears) -> None:
        self.dtype = dtype
        self.buffer = torch.empty(sum(lin.weight.numel() for lin in linears), dtype=dtype)
        self.used = 0

    def needed(self, linears) -> bool:
        return any(lin.weight.dtype != self.dtype for lin in linears)

    def copy(self, linears) -> torch.Tensor:
        """The weights of `linears` rounded and stacked (sum of outs, in), a view of the buffer."""
        rows, cols = sum(lin.weight.size(0) for lin in linears), linears[0].weight.size(1)
        out = self.buffer[self.used : self.used + rows * cols].view(rows, cols)  # (out, in)
        self.used += rows * cols
        start = 0
        for lin in linears:
            out[start : start + lin.weight.size(0)].copy_(lin.weight)  # rounded to the dtype
            start += lin.weight.size(0)
        return out


def _rounded_product(x: torch.Tensor, weight: torch.Tensor, bias) -> torch.Tensor:
    """x (N, in) float32 · weight (out, in) in a lower precision: x rounded to the weight's
    dtype, the product accumulated in float32 by the library and returned in float32 (N, out),
    a float32 bias added after (sampling/precision.py)."""
    out = F.linear(x.to(weight.dtype), weight).float()  # (N, out)
    return out if bias is None else out.add_(bias)


class _Product:
    """x -> the outputs of several nn.Linear of one input side by side (N, sum of outs): one
    product of their joined weights where `join`, else one per layer and a concatenation (a
    large model's weights are not copied: its step is its products anyway). With `rounding`
    (bfloat16 sampling) one product on the rounded copy of their weights, joined always (the
    copy is made anyway). With `native` (ops/native.py's kernels) float32 products run through
    their `linear`, made for a decode's few rows."""

    def __init__(
        self, linears, rows: int, join: bool, rounding: _Rounding | None = None, native=None
    ) -> None:
        if rounding is not None and rounding.needed(linears):
            self.parts = [(rounding.copy(linears), _joined_bias(linears))]
            self.fns = [_rounded_product]
            return
        if join and len(linears) > 1:
            self.parts = [_joined(linears)]
        else:
            self.parts = [(lin.weight, lin.bias) for lin in linears]
        self.fns = [
            native.linear if native is not None and _native_ok(w, b) else product_for(rows, w, b)
            for w, b in self.parts
        ]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.parts) == 1:
            (w, b), fn = self.parts[0], self.fns[0]
            return fn(x, w, b)
        return torch.cat([fn(x, w, b) for fn, (w, b) in zip(self.fns, self.parts)], dim=-1)


def _native_ok(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the native `linear` takes this weight and bias: contiguous float32 on the CPU."""
    tensors = [weight] if bias is None else [weight, bias]
    return all(_plain_f32_cpu(t) and t.is_contiguous() for t in tensors)


def _rms_norm(norm, fused=None):
    """x -> norm(x) for a Llama/Qwen2 RMSNorm: torch's one-call rms_norm in float32 (the module's
    own float32 arithmetic in C++), or with `fused` (ops/native.py's kernels) their one-pass
    rms_norm; else the module itself."""
    eps = getattr(norm, "variance_epsilon", None)
    weight = getattr(norm, "weight", None)
    if eps is None or weight is None or weight.dtype != torch.float32:
        return norm
    if fused is not None:
        return lambda x: fused.rms_norm(x, weight, eps)
    shape = (weight.size(0),)
    return lambda x: F.rms_norm(x, shape, weight, eps)


class _Step:
    """One layer as a decode step runs it: q, k and v in one product (and gate with up) when
    `join`, the norms as one call each, q and k rotated together."""

    def __init__(
        self, layer: _Layer, rows: int, join: bool, rounding: _Rounding | None, fused=None
    ) -> None:
        self.input_norm = _rms_norm(layer.input_norm, fused)
        self.post_norm = _rms_norm(layer.post_norm, fused)
        self.qkv = _Product([layer.q, layer.k, layer.v], rows, join, rounding, fused)
        self.o = _Product([layer.o], rows, join, rounding, fused)
        self.gate_up = _Product([layer.gate, layer.up], rows, join, rounding, fused)
        self.down = _Product([layer.down], rows, join, rounding, fused)
        self.width = layer.gate.weight.size(0)  # F, the MLP's inner width
        self.act = F.silu if _is_silu(layer.act) else layer.act
        self.scaling = layer.scaling


def _is_silu(act) -> bool:
    """torch's or transformers' SiLU module, its forward F.silu (not replaced on the instance)."""
    named = type(act).__name__ in ("SiLU", "SiLUActivation")
    return named and isinstance(act, torch.nn.Module) and "forward" not in vars(act)


class LeanDecoder:
    """Callable (tokens (N,), attention (N, L), positions (N, 1)) -> next-token logits (N, V),
    where L = prompt length + tokens fed so far, including this one: the token's keys and values
    go to position L - 1 of the buffers. `start(attention, positions)` then `step(tokens)` runs
    the same computation with the mask and the rotary angles of every step worked out once.

    Per layer and token: one product for q, k and v together, one for gate and up together
    (`_joined`), the norms as torch's one-call rms_norm, q and k rotated together, keys and
    values written in place into buffers per layer (keys transposed): about a third of the calls
    of the modules' own code, the same arithmetic (bench/decode_floor.py measures it)."""

    def __init__(
        self, base, layers: list[_Layer], cache, capacity: int, dtype: torch.dtype | None = None
    ) -> None:
        inner = base.model
        self.embed_w = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        # ops/native.py's fused kernels: float32 keys, values and activations only
        fused = NATIVE and self.embed_w.dtype == torch.float32
        self.native = native.decode_ops() if fused else None
        self.norm = _rms_norm(inner.norm, self.native)
        self.lm_head = _plain_linear(base.lm_head)
        self.layers = layers
        # Per layer: keys stored transposed, (N, Hkv, D, capacity), so the scores' product reads
        # them as it multiplies (half the time of a product with transposed keys, which torch
        # copies first); values (N, Hkv, capacity, D).
        self.keys, self.values = [], []
        for i in range(len(layers)):
            k, v = _cache_tensors(cache, i)  # (N, Hkv, P, D)
            N, Hkv, P, D = k.shape
            keys = k.new_empty(N, Hkv, D, capacity)  # (N, Hkv, D, capacity)
            keys[..., :P] = k.transpose(2, 3)
            values = v.new_empty(N, Hkv, capacity, D)  # (N, Hkv, capacity, D)
            values[:, :, :P] = v
            self.keys.append(keys)
            self.values.append(values)
        self.head_dim, self.kv_heads, self.capacity = D, Hkv, capacity
        self.heads = layers[0].q.weight.size(0) // D
        # Per product, F.linear or oneDNN's product, whichever is faster here for N rows.
        # q/k/v and gate/up joined where their copies stay under JOIN_LIMIT bytes.
        joined = [
            lin for layer in layers for lin in (layer.q, layer.k, layer.v, layer.gate, layer.up)
        ]
        copies = sum(lin.weight.numel() * lin.weight.element_size() for lin in joined)
        rounding = None
        if dtype is not None:  # bfloat16 sampling: every weight rounded, in one buffer
            release_free_heap()
            rounding = _Rounding(dtype, [lin for x in layers for lin in x.linears] + [self.lm_head])
        self.steps = [
            _Step(layer, N, copies <= JOIN_LIMIT, rounding, self.native) for layer in layers
        ]
        self.head = _Product([self.lm_head], N, False, rounding, self.native)
        # bfloat16 sampling (sampling/precision.py): whether any product runs on rounded copies
        self.rounded = any(
            p.fns[0] is _rounded_product
            for p in [self.head] + [q for s in self.steps for q in (s.qkv, s.o, s.gate_up, s.down)]
        )
        products = [self.head] + [p for s in self.steps for p in (s.qkv, s.o, s.gate_up, s.down)]
        self.products = {(id(p), i): fn for p in products for i, fn in enumerate(p.fns)}
        self.length = self.prompt = 0  # positions filled (prompt + tokens fed), prompt length
        # Rows holding copies of one prompt's keys and values (share_prompts): the run of each
        # row, and the row whose copy the whole step reads for all of them (None: its own).
        self.prompt_of: torch.Tensor | None = None
        self.lead: torch.Tensor | None = None
        self.script, self.script_args = self._scripted(inner, layers)
        # The script's very operations in one call of the kernels, each thread taking its rows
        # through every layer (ops/native_decode.cpp's decode_step): the same bits, no barriers.
        self.whole = (
            WHOLE_STEP
            and self.script is not None
            and self.native is not None
            and native.has_step(self.native)
        )

    def _scripted(self, inner, layers: list[_Layer]):
        """(decode_script's compiled layers, its arguments after `L`) when this model's step is
        one it runs as the Python step does, else (None, ()): every product one F.linear (the
        native `linear` with the fused kernels), every norm torch's rms_norm in float32, the
        activation SiLU, one width and scaling."""
        fn = decode_script.layers_step(self.native is not None) if SCRIPTED else None
        linear = F.linear if self.native is None else self.native.linear
        norms = [inner.norm] + [n for x in layers for n in (x.input_norm, x.post_norm)]
        if fn is None or not all(_rms_norm(n) is not n for n in norms):
            return None, ()
        products = [self.head] + [p for s in self.steps for p in (s.qkv, s.o, s.gate_up, s.down)]
        if any(len(p.parts) != 1 or p.fns[0] is not linear for p in products):
            return None, ()
        if any(s.act is not F.silu for s in self.steps):
            return None, ()
        if len({(s.width, s.scaling) for s in self.steps}) != 1:
            return None, ()
        if any(x.input_norm.variance_epsilon != x.post_norm.variance_epsilon for x in layers):
            return None, ()  # the script takes one epsilon per layer

        def weights(name: str) -> tuple[list, list]:
            parts = [getattr(s, name).parts[0] for s in self.steps]
            return [w for w, _ in parts], [b for _, b in parts]

        args = (
            [x.input_norm.weight for x in layers],
            [x.post_norm.weight for x in layers],
            [float(x.input_norm.variance_epsilon) for x in layers],
            *weights("qkv"),
            *weights("o"),
            *weights("gate_up"),
            *weights("down"),
            self.keys,
            self.values,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.steps[0].width,
            float(self.steps[0].scaling),
            inner.norm.weight,
            float(inner.norm.variance_epsilon),
            *self.head.parts[0],
        )
        return fn, args

    def _angles(self, positions: torch.Tensor):
        """(cos, sin·sign) (N, T, D) for positions (N, T): rotate_half(x)·sin is
        x.roll(D/2)·(sin with its first half negated), exactly."""
        h = self.embed_w.new_empty(0)
        cos, sin = self.rotary(h, positions)  # (N, T, D) each
        half = self.head_dim // 2
        return cos, torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)

    def start(self, attention: torch.Tensor, positions: torch.Tensor) -> None:
        """Before step(): the prompts' mask (N, P) and the first new token's positions (N, 1).
        The rotary angles of every position up to the buffers' end come from one call (the same
        values as one call per step: one product and a cosine per element)."""
        P = attention.size(1)
        ahead = torch.arange(self.capacity - P, device=positions.device)  # (T,)
        self.cos, self.sin = self._angles(positions + ahead)  # (N, T, D)
        blocked = attention == 0  # (N, P)
        self.blocked = None
        if bool(blocked.any()):  # left padding: those positions are never attended to
            full = blocked.new_zeros(attention.size(0), 1, 1, self.capacity)  # (N, 1, 1, cap)
            full[:, 0, 0, :P] = blocked
            self.blocked = full
        self.length = self.prompt = P

    def share_prompts(self, owner: torch.Tensor) -> None:
        """Rows with the same owner (N,) (sampler.prompt_runs' runs: a group's answers) hold
        copies of one prompt's keys and values: the whole step reads the first such row's copy
        for all of them, which stays in the cache where each row's own came from memory (the
        same numbers, so the same logits)."""
        self.prompt_of = owner.to(torch.long)
        self._find_leads()

    def _find_leads(self) -> None:
        """self.lead (N,): for each row, the first row with its prompt."""
        owner = self.prompt_of
        N = owner.numel()
        rows = torch.arange(N, device=owner.device)  # (N,)
        first = torch.full((int(owner.max()) + 1,), N, dtype=torch.long, device=owner.device)
        first.scatter_reduce_(0, owner, rows, "amin")  # (U,) first row of each run
        self.lead = first.index_select(0, owner)  # (N,)

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with only the rows `rows` (K,) of the current ones (after start()): their keys,
        values, rotary angles and mask are kept, the others' dropped (rows that ended cost
        nothing more). Each kept row's numbers are unchanged; later steps take K rows."""
        if self.prompt_of is not None:
            self.prompt_of = self.prompt_of.index_select(0, rows)
            self._find_leads()
        for buffers in (self.keys, self.values):  # the lists the script's arguments hold
            for i, t in enumerate(buffers):
                buffers[i] = t.index_select(0, rows)  # (K, ...)
        self.cos, self.sin = self.cos.index_select(0, rows), self.sin.index_select(0, rows)
        if self.blocked is not None:
            self.blocked = self.blocked.index_select(0, rows)  # (K, 1, 1, capacity)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The next token's logits (N, V) after feeding `tokens` (N,) (after start())."""
        t = self.length - self.prompt  # this token's index among the new ones
        self.length += 1
        L = self.length
        blocked = None if self.blocked is None else self.blocked[..., :L]
        return self._run(tokens, self.cos[:, t], self.sin[:, t], blocked, L)

    def __call__(
        self, tokens: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        cos, sin = self._angles(positions)  # (N, 1, D)
        blocked = attention[:, None, None, :] == 0  # (N, 1, 1, L) padding left of a prompt
        return self._run(tokens, cos[:, 0], sin[:, 0], blocked, attention.size(1))

    def _run(self, tokens, cos, sin, blocked, L: int) -> torch.Tensor:
        """Logits (N, V) of the token after `tokens` (N,) at cache position L - 1, with the
        rotary angles cos, sin (N, D) of its position and `blocked` (N, 1, 1, L) or None."""
        N, D, Hkv, H = tokens.size(0), self.head_dim, self.kv_heads, self.heads
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (N, 1, D)
        h = F.embedding(tokens, self.embed_w)  # (N, E)
        # The script's operations below in one call of the kernels, each thread's rows through
        # every layer, where a thread has rows enough
        if self.whole and N // torch.get_num_threads() >= WHOLE_MIN_ROWS:
            try:
                return self.native.decode_step(
                    h, cos, sin, blocked, L, *self.script_args, self.lead, self.prompt
                )  # (N, V)
            except RuntimeError:  # its checks refused these tensors before it wrote anything
                self.whole = False
        if self.script is not None:  # the same operations below, in TorchScript's loop
            try:
                with torch.jit.optimized_execution(False):
                    return self.script(h, cos, sin, blocked, L, *self.script_args)  # (N, V)
            except RuntimeError:
                # Not expected (_scripted checked the model): this decoder goes on in Python,
                # which runs this token again from its embedding (the script added to `h` in
                # place) and writes its keys and values again.
                self.script = None
                h = F.embedding(tokens, self.embed_w)  # (N, E)
        for s, keys, values in zip(self.steps, self.keys, self.values):
            x = s.input_norm(h)  # (N, E)
            qkv = s.qkv(x).view(N, H + 2 * Hkv, D)  # (N, H + 2Hkv, D)
            if self.native is not None:  # _attend's work in one kernel (ops/native.py)
                out = self.native.rope_attend(
                    qkv, cos, sin, keys, values, L, H, Hkv, s.scaling, blocked
                )  # (N, H * D)
            else:
                out = self._attend(qkv, cos, sin, keys, values, L, s.scaling, blocked)
            h.add_(s.o(out))  # (N, E)
            gu = s.gate_up(s.post_norm(h))  # (N, 2F)
            if self.native is not None and s.act is F.silu:
                gated = self.native.silu_mul(gu, s.width)  # (N, F)
            else:
                gated = s.act(gu[:, : s.width]).mul_(gu[:, s.width :])  # (N, F)
            h.add_(s.down(gated))  # (N, E)
        return self.head(self.norm(h))  # (N, V)

    def _attend(self, qkv, cos, sin, keys, values, L: int, scaling: float, blocked):
        """One layer's attention in torch's operations: q and k rotated (in place in qkv), this
        token's key and value written at position L - 1, then (N, H * D) attended outputs."""
        N, D, Hkv, H = qkv.size(0), self.head_dim, self.kv_heads, self.heads
        qk = qkv[:, : H + Hkv]  # (N, H + Hkv, D) the query and key heads, rotated in place
        torch.add(qk * cos, qk.roll(D // 2, dims=-1) * sin, out=qk)
        keys[..., L - 1] = qkv[:, H : H + Hkv]  # this token's keys (N, Hkv, D)
        values[:, :, L - 1] = qkv[:, H + Hkv :]  # and values (N, Hkv, D)
        # The H query heads as Hkv groups of H/Hkv "positions": query head i reads key/value
        # head i // (H/Hkv), as transformers' repeat_kv does, without copying the cache.
        grouped = qkv[:, :H].reshape(N, Hkv, -1, D)  # (N, Hkv, H/Hkv, D)
        # Written out: for one query per row, two batched products beat the CPU's flash
        # attention kernel, which is tiled for long queries.
        scores = torch.matmul(grouped, keys[..., :L]).mul_(scaling)  # (N, Hkv, H/Hkv, L)
        if blocked is not None:
            scores.masked_fill_(blocked, float("-inf"))  # (N, Hkv, H/Hkv, L)
        probs = torch.softmax(scores, dim=-1)  # (N, Hkv, H/Hkv, L)
        return torch.matmul(probs, values[:, :, :L]).reshape(N, -1)  # (N, H * D)


def supported_model(model):
    """(transformers model, its decoder) when `model` is one a hand-run decode step computes
    exactly: Llama or Qwen2, every layer full attention, sdpa or eager attention, no hooks on the
    model, its decoder, embedding, final norm or output layer; else None. Shared with
    engine/sampling/decode_static.py, which adds its own checks of the layers."""
    base = _base_model(model)
    config = getattr(base, "config", None)
    if type(base).__name__ not in ARCHITECTURES or config is None:
        return None
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return None
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return None
    if getattr(config, "use_sliding_window", False):
        return None
    inner = getattr(base, "model", None)
    needed = ("embed_tokens", "rotary_emb", "norm", "layers")
    if inner is None or not all(hasattr(inner, n) for n in needed):
        return None
    if any(_hooked(m) for m in (base, inner, inner.embed_tokens, inner.norm, base.lm_head)):
        return None
    return base, inner


def lean_decoder(
    model, cache, capacity: int, dtype: torch.dtype | None = None
) -> LeanDecoder | None:
    """A LeanDecoder continuing from `cache` (the prefill's, every row expanded) with room for
    `capacity` positions in all, or None when this model is not one it can run exactly.
    `dtype` (bfloat16 sampling, sampling/precision.py): its products on weights rounded to it."""
    found = supported_model(model)
    if found is None:
        return None
    base, inner = found
    if inner.embed_tokens.weight.device.type != "cpu":
        return None  # a CPU step; GPUs use decode_static.py (fixed shapes for CUDA graphs)
    try:
        layers = [_Layer(layer) for layer in inner.layers]
    except AttributeError:
        return None
    for layer in layers:
        if layer.extra or any(lin is None for lin in layer.linears):
            return None
        if any(_hooked(m) for m in layer.modules + layer.linears):
            return None
    if _plain_linear(base.lm_head) is None:
        return None
    for i in range(len(layers)):
        kv = _cache_tensors(cache, i)
        if kv is None or kv[0] is None or kv[0].dim() != 4 or kv[0].size(2) >= capacity:
            return None
        if {kv[0].dtype, kv[1].dtype} != {inner.embed_tokens.weight.dtype}:  # under autocast
            return None
    return LeanDecoder(base, layers, cache, capacity, dtype)
