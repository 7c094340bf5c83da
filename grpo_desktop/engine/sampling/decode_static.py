"""A decode step whose every tensor keeps its shape and address from token to token (for CUDA).

On a GPU an eager decode step costs host time, thousands of operations dispatched per token
(bench/README.md, `decode_overhead.py`), not arithmetic. A captured CUDA graph replays a step's
kernels in one call, but only if every step is the same kernels on the same memory, and
`StaticDecoder.step` is: keys and values go into buffers sized for the whole completion, at a
slot held in a device tensor; attention reads the buffers' whole capacity through an additive
mask that opens each slot as it is written; positions come from a device counter; nothing is
read back to the host. The step is idempotent (the counter moves only in `advance()`), so
decode_graph.py can warm it up, capture it and check the graph against it without disturbing
the decode. Models: decode.py's gate (`supported_model`), LoRA layers left unfolded and 4-bit
bases called as modules, a RoPE that does not depend on the length; else `static_decoder`
returns None. It does no sampling, and on the CPU decode.py's `LeanDecoder` is faster.

Try it: tests/engine/sampling/test_decode_static.py (each step against the model's forward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grpo_desktop.engine.sampling.decode import (
    MLP,
    PROJECTIONS,
    _cache_tensors,
    _hooked,
    _plain_linear,
    supported_model,
)


def _lora_layer(module) -> bool:
    """A peft LoRA layer this step can call as it is: no DoRA, no LoRA bias."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return False
    if not isinstance(module, LoraLayer):
        return False
    names = module.active_adapters
    if any(module.use_dora.get(n, False) for n in names):
        return False
    return not any(getattr(module, "lora_bias", {}).get(n, False) for n in names)


def _linear4bit(module) -> bool:
    try:
        import bitsandbytes as bnb
    except ImportError:
        return False
    return isinstance(module, bnb.nn.Linear4bit)


def projection(module):
    """A function x (..., in) -> (..., out) computing `module`, or None when this step cannot
    run it exactly: F.linear for a plain nn.Linear (or a LoRA layer whose adapters `lora_merged`
    folded away), the module itself for a LoRA layer over nn.Linear or a 4-bit `Linear4bit`, or
    for a bare `Linear4bit`."""
    plain = _plain_linear(module)
    if plain is not None:
        return lambda x: F.linear(x, plain.weight, plain.bias)
    if _lora_layer(module):
        base = module.base_layer
        if type(base) is torch.nn.Linear or _linear4bit(base):
            return module
        return None
    return module if _linear4bit(module) else None


class _StaticLayer:
    """The modules of one decoder layer, each projection resolved to a function."""

    def __init__(self, layer) -> None:
        attn = layer.self_attn
        self.input_norm = layer.input_layernorm
        self.post_norm = layer.post_attention_layernorm
        self.act = layer.mlp.act_fn
        self.scaling = attn.scaling
        self.raw = [getattr(attn, n) for n in PROJECTIONS] + [getattr(layer.mlp, n) for n in MLP]
        self.q, self.k, self.v, self.o, self.gate, self.up, self.down = map(projection, self.raw)
        self.modules = [layer, attn, layer.mlp, self.input_norm, self.post_norm]
        self.extra = hasattr(attn, "q_norm") or hasattr(attn, "k_norm")  # Qwen3-style: not ours

    def runnable(self) -> bool:
        funcs = (self.q, self.k, self.v, self.o, self.gate, self.up, self.down)
        if self.extra or any(f is None for f in funcs):
            return False
        plain = [_plain_linear(m) or m for m in self.raw]
        return not any(_hooked(m) for m in self.modules + plain)


class StaticDecoder:
    """One decode step with fixed shapes. Write the fed token ids into `tokens` (N,), call
    `step()` for the next-token logits (N, V), then `advance()`; `__call__(tokens)` does all
    three (the eager way to use it). Built from the prefill's cache (every row expanded), the
    prompt mask (N, P) and the prompt positions (N, P); room for `capacity` positions in all."""

    def __init__(
        self, base, layers: list[_StaticLayer], cache, capacity: int, attention, positions
    ) -> None:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.rotate = apply_rotary_pos_emb
        inner = base.model
        self.embed, self.rotary, self.norm = inner.embed_tokens, inner.rotary_emb, inner.norm
        self.lm_head = projection(base.lm_head)
        self.layers = layers
        self.keys, self.values = [], []
        for i in range(len(layers)):
            k, v = _cache_tensors(cache, i)  # (N, Hkv, P, D)
            N, Hkv, P, D = k.shape
            buf_k = k.new_zeros(N, Hkv, capacity, D)  # (N, Hkv, capacity, D): finite where unread
            buf_v = v.new_zeros(N, Hkv, capacity, D)
            buf_k[:, :, :P] = k
            buf_v[:, :, :P] = v
            self.keys.append(buf_k)
            self.values.append(buf_v)
        self.rows, self.prompt_len, self.capacity, self.head_dim = N, P, capacity, D
        device, dtype = k.device, k.dtype
        blocked = torch.finfo(dtype).min
        mask = torch.full((N, 1, 1, capacity), blocked, dtype=dtype, device=device)
        mask[:, 0, 0, :P] = (attention == 0).to(dtype) * blocked  # (N, P): 0 at real tokens
        # (N, 1, 1, capacity) additive: 0 open, dtype's min closed. Attention reads all of it,
        # so its shape never changes; each new slot is opened as its token is written.
        self.mask = mask
        self.first_position = positions[:, -1:] + 1  # (N, 1) position of the first new token
        # (1,) tokens fed before: a device tensor, not a Python int that a graph would bake in
        self.fed = torch.zeros(1, dtype=torch.long, device=device)
        self.tokens = torch.zeros(N, dtype=torch.long, device=device)  # (N,) this step's input
        self.steps = 0  # host-side count, only to refuse a step past the buffers' end

    @property
    def room(self) -> int:
        """Decode steps left before the buffers are full."""
        return self.capacity - self.prompt_len - self.steps

    def step(self) -> torch.Tensor:
        """Logits (N, V) after feeding `tokens` at slot prompt_len + fed. Writes that slot's keys,
        values and mask and nothing else: repeating it gives the same result."""
        N, D = self.rows, self.head_dim
        slot = self.fed + self.prompt_len  # (1,) buffer index of this token
        positions = self.first_position + self.fed  # (N, 1)
        self.mask.index_fill_(3, slot, 0.0)  # (N, 1, 1, capacity): this token is visible
        h = self.embed(self.tokens.unsqueeze(1))  # (N, 1, E)
        cos, sin = self.rotary(h, positions)  # (N, 1, D) each
        for layer, keys, values in zip(self.layers, self.keys, self.values):
            x = layer.input_norm(h)  # (N, 1, E)
            q = layer.q(x).view(N, 1, -1, D).transpose(1, 2)  # (N, H, 1, D)
            k = layer.k(x).view(N, 1, -1, D).transpose(1, 2)  # (N, Hkv, 1, D)
            v = layer.v(x).view(N, 1, -1, D).transpose(1, 2)  # (N, Hkv, 1, D)
            q, k = self.rotate(q, k, cos, sin)
            keys.index_copy_(2, slot, k.to(keys.dtype))  # (N, Hkv, capacity, D)
            values.index_copy_(2, slot, v.to(values.dtype))
            Hkv = keys.size(1)
            # Query head i reads key/value head i // (H/Hkv), as transformers' repeat_kv does.
            grouped = q.reshape(N, Hkv, -1, D).to(keys.dtype)  # (N, Hkv, H/Hkv, D)
            scores = torch.matmul(grouped, keys.transpose(2, 3)) * layer.scaling
            scores = scores + self.mask  # (N, Hkv, H/Hkv, capacity)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
            out = torch.matmul(probs, values)  # (N, Hkv, H/Hkv, D)
            h = h + layer.o(out.reshape(N, 1, -1).to(h.dtype))  # (N, 1, E)
            x = layer.post_norm(h)
            h = h + layer.down(layer.act(layer.gate(x)) * layer.up(x))  # (N, 1, E)
        return self.lm_head(self.norm(h))[:, -1, :]  # (N, V)

    def advance(self) -> None:
        """Move to the next slot (one in-place add on the device)."""
        self.fed.add_(1)
        self.steps += 1

    def check_room(self) -> None:
        if self.room <= 0:
            raise RuntimeError(
                f"decode buffers hold {self.capacity} positions and all are used: build the "
                "decoder with room for every token the loop feeds"
            )

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """Eager use: feed tokens (N,), return the next-token logits (N, V), advance."""
        self.check_room()
        self.tokens.copy_(tokens)
        logits = self.step()  # (N, V)
        self.advance()
        return logits


def _static_rope(rotary) -> bool:
    """RoPE frequencies that do not depend on the sequence length (no dynamic or longrope)."""
    kind = getattr(rotary, "rope_type", "default")
    kinds = kind.values() if isinstance(kind, dict) else [kind]
    return all("dynamic" not in str(k) and "longrope" not in str(k) for k in kinds)


def static_decoder(model, cache, capacity: int, attention, positions) -> StaticDecoder | None:
    """A StaticDecoder continuing from `cache` (the prefill's, every row expanded) with room for
    `capacity` positions, or None when this model is not one it runs exactly. `attention` and
    `positions` are the prompts' mask and positions (N, P)."""
    found = supported_model(model)
    if found is None:
        return None
    base, inner = found
    if not _static_rope(inner.rotary_emb):
        return None
    try:
        layers = [_StaticLayer(layer) for layer in inner.layers]
    except AttributeError:
        return None
    if not all(layer.runnable() for layer in layers):
        return None
    if projection(base.lm_head) is None:
        return None
    weight_dtype = inner.embed_tokens.weight.dtype
    for i in range(len(layers)):
        kv = _cache_tensors(cache, i)
        if kv is None or kv[0] is None or kv[0].dim() != 4 or kv[0].size(2) >= capacity:
            return None
        if {kv[0].dtype, kv[1].dtype} != {weight_dtype}:  # prefilled under autocast
            return None
    return StaticDecoder(base, layers, cache, capacity, attention, positions)
