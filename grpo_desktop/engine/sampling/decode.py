"""One decode step of a Llama-family model on the CPU, without transformers' per-call machinery.

Through the model's own `forward`, each one-token step also builds a causal mask, goes through
every module's hooks and output capture, and grows the key/value cache by concatenation (a copy
of the whole cache per token); on the small models this app trains on a CPU, that bookkeeping
costs as much as the arithmetic (bench/README.md, "Where the speed comes from"). `LeanDecoder`
runs the same computation on the model's own modules (norms, MLPs, projections, rotary
embedding, transformers' `apply_rotary_pos_emb`), keys and values written in place into buffers
sized for the whole completion: the forward's logits up to float rounding. It covers what it
can check: Llama and Qwen2 on the CPU, every layer full attention, each projection a plain
`nn.Linear` (LoRA only while `lora_merged` has folded it), no hooks; for anything else
`lean_decoder` returns None and the sampler calls the model. CUDA uses decode_static.py.

Try it: tests/engine/sampling/test_decode.py (its logits and tokens against the forward's).
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.ops.kernels import product_for

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
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


class LeanDecoder:
    """Callable (tokens (N,), attention (N, L), positions (N, 1)) -> next-token logits (N, V),
    where L = prompt length + tokens fed so far, including this one: the token's keys and values
    go to position L - 1 of the buffers."""

    def __init__(self, base, layers: list[_Layer], cache, capacity: int) -> None:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.rotate = apply_rotary_pos_emb
        inner = base.model
        self.embed, self.rotary, self.norm = inner.embed_tokens, inner.rotary_emb, inner.norm
        self.lm_head = _plain_linear(base.lm_head)
        self.layers = layers
        self.keys, self.values = [], []
        for i in range(len(layers)):
            k, v = _cache_tensors(cache, i)  # (N, Hkv, P, D)
            N, Hkv, P, D = k.shape
            buf_k = k.new_empty(N, Hkv, capacity, D)  # (N, Hkv, capacity, D)
            buf_v = v.new_empty(N, Hkv, capacity, D)
            buf_k[:, :, :P] = k
            buf_v[:, :, :P] = v
            self.keys.append(buf_k)
            self.values.append(buf_v)
        self.head_dim = D
        # Per projection, F.linear or oneDNN's product, whichever is faster here for N rows.
        linears = [lin for layer in layers for lin in layer.linears] + [self.lm_head]
        self.products = {id(lin): product_for(N, lin.weight, lin.bias) for lin in linears}

    def _apply(self, module, x: torch.Tensor) -> torch.Tensor:
        return self.products[id(module)](x, module.weight, module.bias)

    def __call__(
        self, tokens: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        N, L, D = tokens.size(0), attention.size(1), self.head_dim
        h = self.embed(tokens.unsqueeze(1))  # (N, 1, E)
        cos, sin = self.rotary(h, positions)  # (N, 1, D) each
        blocked = attention[:, None, None, :] == 0  # (N, 1, 1, L) padding left of a prompt
        for layer, keys, values in zip(self.layers, self.keys, self.values):
            x = layer.input_norm(h)  # (N, 1, E)
            q = self._apply(layer.q, x).view(N, 1, -1, D).transpose(1, 2)  # (N, H, 1, D)
            k = self._apply(layer.k, x).view(N, 1, -1, D).transpose(1, 2)  # (N, Hkv, 1, D)
            v = self._apply(layer.v, x).view(N, 1, -1, D).transpose(1, 2)  # (N, Hkv, 1, D)
            q, k = self.rotate(q, k, cos, sin)
            keys[:, :, L - 1 : L] = k
            values[:, :, L - 1 : L] = v
            Hkv = k.size(1)
            # The H query heads as Hkv groups of H/Hkv "positions": query head i reads key/value
            # head i // (H/Hkv), as transformers' repeat_kv does, without copying the cache.
            grouped = q.reshape(N, Hkv, -1, D)  # (N, Hkv, H/Hkv, D)
            # Written out: for one query per row, two batched products beat the CPU's flash
            # attention kernel, which is tiled for long queries.
            scores = torch.matmul(grouped, keys[:, :, :L].transpose(2, 3)) * layer.scaling
            scores = scores.masked_fill_(blocked, float("-inf"))  # (N, Hkv, H/Hkv, L)
            probs = torch.softmax(scores, dim=-1)  # (N, Hkv, H/Hkv, L)
            out = torch.matmul(probs, values[:, :, :L])  # (N, Hkv, H/Hkv, D)
            h = h + self._apply(layer.o, out.reshape(N, 1, -1))  # (N, 1, E)
            x = layer.post_norm(h)
            gated = layer.act(self._apply(layer.gate, x)) * self._apply(layer.up, x)  # (N, 1, F)
            h = h + self._apply(layer.down, gated)  # (N, 1, E)
        return self._apply(self.lm_head, self.norm(h))[:, -1, :]  # (N, V)


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


def lean_decoder(model, cache, capacity: int) -> LeanDecoder | None:
    """A LeanDecoder continuing from `cache` (the prefill's, every row expanded) with room for
    `capacity` positions in all, or None when this model is not one it can run exactly."""
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
    return LeanDecoder(base, layers, cache, capacity)
