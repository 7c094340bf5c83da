"""The sampler's decode paths: each computes the next token's logits one way, behind one method.

`sampler.sample_tokens` chooses one of these once per call, after the prefill, and its loop then
calls `decoder.step(tokens, positions)` per token: the tokens just drawn (N,) at their positions
(N, 1) in, the next token's logits (N, V) out; `close()` after the loop. `name` is what
`sampler.last_decode_path()` reports. The paths: `LeanDecode` (decode.py's hand-run step, Llama
and Qwen2 on the CPU), `StaticDecode` (decode_static.py's fixed-shape step, replayed as a CUDA
graph by decode_graph.py; its first token is checked against the model's own forward),
`ForwardDecode` (the model's forward with transformers' cache: any model) and `PrefillOnly`
(one token: the prefill's logits are all the call needs). They keep the growing attention mask
and the cache to themselves; sampling (temperature, top-p, the draw, EOS) stays in the sampler.

Try it: tests/engine/sampling/test_decode_static.py and test_decode.py decode through each.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from grpo_desktop.engine.ops.kernels import fast_linear
from grpo_desktop.engine.sampling.decode import LeanDecoder
from grpo_desktop.engine.sampling.decode_graph import GraphedDecode

FORWARD_TOLERANCE = 0.05  # static step vs the model's forward on the first token, of the scale
# The sampler's log: the static step's hand-over is a warning about the sampling call.
log = logging.getLogger("grpo_desktop.engine.sampling.sampler")


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


class Decoder:
    """One decode path: `step(tokens (N,), positions (N, 1)) -> logits (N, V)` of the next token,
    each call feeding one more token per row; `close()` frees what it holds."""

    name = "none"

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def keep(self, rows: torch.Tensor) -> bool:
        """Go on decoding only rows `rows` (K,) of the current ones, if this path can drop rows
        (True); False: it goes on with all of them."""
        return False

    def share_prompts(self, owner: torch.Tensor) -> None:
        """Rows with the same owner (N,) hold copies of one prompt's keys and values: a path that
        can read one copy for all of them may (the same numbers)."""

    def close(self) -> None:
        """Nothing to free unless a path says so."""


class PrefillOnly(Decoder):
    """A call that samples at most one token: it comes from the prefill's logits."""

    name = "prefill only"

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a one-token sampling call has no decode step")


class ForwardDecode(Decoder):
    """The model's own forward on transformers' cache, the attention mask grown by one per token.
    Runs any model whose forward takes these arguments."""

    name = "forward"

    def __init__(self, model, cache, attention: torch.Tensor) -> None:
        self.model, self.cache = model, cache
        self.attention = attention  # (N, L) prompt and tokens fed so far
        self.ones = attention.new_ones(attention.size(0), 1)  # (N, 1)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.attention = torch.cat([self.attention, self.ones], dim=1)  # (N, L + 1)
        with fast_linear(tokens.device):
            out = self.model(
                input_ids=tokens.unsqueeze(1),  # (N, 1)
                attention_mask=self.attention,
                position_ids=positions,
                use_cache=True,
                **{CACHE: self.cache},
            )
        self.cache = out_cache(out)
        return out.logits[:, -1, :]  # (N, V)


class LeanDecode(Decoder):
    """decode.py's `LeanDecoder`: the model's weights used by hand, keys and values in its own
    buffers (the prefill's cache was copied into them), the mask and the rotary angles of the
    whole decode worked out before the first step: it needs neither per token."""

    name = "lean"

    def __init__(self, lean: LeanDecoder, attention: torch.Tensor, positions: torch.Tensor) -> None:
        self.lean = lean
        if lean.rounded:  # bfloat16 sampling (sampling/precision.py)
            self.name = "lean (bfloat16)"
        lean.start(attention, positions)  # (N, P) prompts' mask, (N, 1) the first new position

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.lean.step(tokens)  # (N, V)

    def keep(self, rows: torch.Tensor) -> bool:
        self.lean.keep(rows)
        return True

    def share_prompts(self, owner: torch.Tensor) -> None:
        self.lean.share_prompts(owner)


class StaticDecode(Decoder):
    """decode_static.py's fixed-shape step through decode_graph.py's `GraphedDecode` (a CUDA graph
    where capture works). Its first token is also run through the model's own forward on the
    prefill's cache: when the two agree within FORWARD_TOLERANCE of the logits' scale the static
    step decodes on and the cache is dropped; else, after one warning, the forward decodes from
    there (`ForwardDecode` on the cache that check grew). A safety net for models and devices
    the tests could not cover (the CPU tests hold the two to 1e-5 in float32); bf16 kernels
    differ by far less than the tolerance. The step needs no mask or positions: it keeps its own."""

    def __init__(self, model, graphed: GraphedDecode, cache, attention: torch.Tensor) -> None:
        self.model, self.graphed, self.cache = model, graphed, cache
        self.attention = attention  # (N, P) until the first token's check
        self.checked = False
        self.forward: ForwardDecode | None = None  # the forward, once the static step disagreed

    @property
    def name(self) -> str:
        if self.forward is not None:
            return "forward (static step disagreed)"
        return "static graph" if self.graphed.mode == "graph" else "static " + self.graphed.mode

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.forward is not None:
            return self.forward.step(tokens, positions)  # (N, V)
        if self.checked:
            return self.graphed(tokens)  # (N, V) fixed shapes: no mask or positions to grow
        self.checked = True
        ones = self.attention.new_ones(self.attention.size(0), 1)  # (N, 1)
        attention = torch.cat([self.attention, ones], dim=1)  # (N, P + 1)
        ours, out = self._first_token(tokens, attention, positions)
        if ours is not None:
            self.cache = self.attention = None  # the static step's buffers hold it all
            return ours  # (N, V)
        self.graphed.close()
        self.forward = ForwardDecode(self.model, out_cache(out), attention)
        self.cache = self.attention = None
        return out.logits[:, -1, :]  # (N, V) on with the forward

    def _first_token(self, tokens, attention, positions):
        """(the static step's logits (N, V), the forward's output) when they agree, else (None,
        the forward's output) after one warning. The forward extends the prefill's cache."""
        out = self.model(
            input_ids=tokens.unsqueeze(1),  # (N, 1)
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            **{CACHE: self.cache},
        )
        reference = out.logits[:, -1, :]  # (N, V)
        try:
            ours = self.graphed(tokens)  # (N, V)
            scale = reference.float().abs().max().clamp(min=1.0)  # ()
            difference = float((ours.float() - reference.float()).abs().max() / scale)
            reason = f"differs from the model's forward by {difference:.3g} of the logits' scale"
            if torch.isfinite(ours).all() and difference <= FORWARD_TOLERANCE:
                return ours, out
        except Exception as exc:  # any failure of the static step: the forward goes on
            first = str(exc).splitlines()[0] if str(exc) else ""
            reason = f"failed ({type(exc).__name__}: {first})"
        log.warning("The fixed-shape decode step %s; decoding with the model's forward", reason)
        return None, out

    def close(self) -> None:
        """Drop the graph and its memory pool: the training pass after sampling needs it."""
        if self.forward is None:
            self.graphed.close()
