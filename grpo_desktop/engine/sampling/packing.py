"""A group's completions packed into one sequence for the log-prob passes, when padding would cost
more than the packed sequence's wider attention.

A group's G answers end at different lengths (SmolLM2-135M on arithmetic: 3 to 64 tokens in one
group, mean 26), and a padded pass runs every row to the longest: (G, C) token positions through
every layer, most of them padding. Packed, the group's rows run as one row of Σ lengths tokens
after the prompt they share (its keys and values computed once, logps.py), each answer seeing the
prompt and its own earlier tokens only (a block mask) at the positions it was sampled at. The
projections and MLPs, most of a step's arithmetic, then do only the real tokens; the attention
does more (every packed token is scored against the whole packed row, the mask hides the
others), so `PackPlan.build` packs only where the estimated cost, both counted, falls to
PACK_BELOW of the padded pass's; the demo's answers, all within a few tokens of 114, stay padded.
Measured on SmolLM2 (bench/packed_passes.py): the reference pass and forward/backward ×1.30.

Where the layers are checkpointed (gradient checkpointing drops a key/value cache), the prompt
and its packed answers go through in one pass (`with_prompt`): the padded alternative runs the
prompt again in every row, so there packing pays nearly always (SmolLM2: ×2.97).

Equal to the padded pass up to float rounding: the same tokens, positions and visible keys.
Needs a decoder that takes a 4-D attention mask as given (transformers' sdpa and eager
attention) and completion masks that are a run of 1s from the first column (sampling's: up to
and including each row's EOS); anything else is left to the padded pass.

Try it: tests/engine/sampling/test_packed_logps.py; bench/packed_passes.py measures it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

PACK_BELOW = 0.85  # pack when the packed pass's estimated cost is below this share of the padded
MAX_PACKED = 4096  # longest packed row (tokens): its block mask is (rows, packed, prompt + packed)
MASKS = ("sdpa", "eager")  # attention implementations that take a given 4-D mask as it is
_costs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # decoder -> (per token, per key)


def token_costs(decoder) -> tuple[float, float] | None:
    """(multiply-adds per token, multiply-adds per token and attended key) of one decoder layer:
    its parameters (projections and MLP), and 2 × the query width (scores, then values). None
    when the decoder has no uniform `layers`, or attention this module cannot mask as the model
    would (an implementation that ignores a given mask, a sliding window)."""
    if decoder in _costs:
        return _costs[decoder]
    config = getattr(decoder, "config", None)
    layers = getattr(decoder, "layers", None)
    costs = None
    if config is not None and layers is not None and len(layers) > 0:
        heads = int(getattr(config, "num_attention_heads", 0) or 0)
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        head_dim = int(getattr(config, "head_dim", 0) or (hidden // heads if heads else 0))
        implementation = getattr(config, "_attn_implementation", None) or "eager"
        # A sliding window (Mistral, Gemma 3) is the model's own mask, which a given one replaces.
        windowed = bool(getattr(config, "sliding_window", None)) and bool(
            getattr(config, "use_sliding_window", True)
        )
        if heads and head_dim and implementation in MASKS and not windowed:
            per_token = float(sum(p.numel() for p in layers[0].parameters()))
            costs = (per_token, 2.0 * heads * head_dim)
    _costs[decoder] = costs
    return costs


@dataclass
class PackPlan:
    """Where each answer's input tokens go in its prompt's packed row, and where each kept hidden
    state comes from. U distinct prompts (runs), N rows, C completion columns, S packed columns."""

    rows: torch.Tensor  # (T,) row of each packed input token
    cols: torch.Tensor  # (T,) its completion column
    runs: torch.Tensor  # (T,) its packed row (the row's prompt run)
    slots: torch.Tensor  # (T,) its column in the packed row
    # (M,) per kept (row, column), row-major: its index in [prompt ends (U) | packed (U × S)]
    source: torch.Tensor
    S: int

    @staticmethod
    def build(
        keep: torch.Tensor,  # (N, C) bool: completion positions scored
        first: torch.Tensor,  # (U,) first row of each prompt run
        owner: torch.Tensor,  # (N,) prompt run of each row (runs are consecutive rows)
        P: int,
        costs: tuple[float, float],
        with_prompt: bool = False,
        scores_kept: bool = False,
    ) -> PackPlan | None:
        """The plan, or None where packing would not pay or the masks are not runs from column 0.
        Each row's hidden state for column 0 comes from its prompt's last position; for column
        t ≥ 1 from its input token t - 1, so a row of length n puts n - 1 tokens in the pack.
        `with_prompt`: the prompt goes through in the same pass (no key/value cache), in the
        packed row and, padded, in every row. `scores_kept`: the attention keeps every score
        (eager attention), so the packed pass may not hold more of them than the padded one."""
        N, C = keep.shape
        U = first.numel()
        lengths = keep.sum(1)  # (N,)
        columns = torch.arange(C, device=keep.device)  # (C,)
        if not torch.equal(keep, columns.unsqueeze(0) < lengths.unsqueeze(1)):
            return None  # not a run of 1s from column 0
        inputs = (lengths - 1).clamp(min=0)  # (N,) tokens each row puts in the pack
        packed = torch.zeros(U, dtype=inputs.dtype, device=keep.device).index_add_(
            0, owner, inputs
        )  # (U,)
        S = int(packed.max()) if U else 0
        per_token, per_key = costs
        ahead = P if with_prompt else 0  # tokens of the pass before the answers
        padded = N * (ahead + max(C - 1, 0)) * (per_token + per_key * (P + C - 1))
        cost = U * (ahead + S) * (per_token + per_key * (P + S))
        if S == 0 or S > MAX_PACKED or cost >= PACK_BELOW * padded:
            return None
        if scores_kept and U * (ahead + S) * (P + S) > N * (ahead + C - 1) * (P + C - 1):
            return None
        before = torch.cumsum(inputs, 0) - inputs  # (N,) packed tokens of all rows above
        start = before - before[first][owner]  # (N,) the row's first slot in its packed row
        takes = columns.unsqueeze(0) < inputs.unsqueeze(1)  # (N, C) columns that are inputs
        rows, cols = takes.nonzero(as_tuple=True)  # (T,), (T,)
        slots = start[rows] + cols  # (T,)
        runs = owner[rows]  # (T,)
        kept_rows, kept_cols = keep.nonzero(as_tuple=True)  # (M,) row-major
        from_pack = U + owner[kept_rows] * S + start[kept_rows] + kept_cols - 1  # (M,)
        source = torch.where(kept_cols == 0, owner[kept_rows], from_pack)  # (M,)
        return PackPlan(rows, cols, runs, slots, source, S)

    def inputs(self, completion_ids, positions, U: int):
        """Packed input ids and positions (U, S): each token at the position it was sampled at;
        unused slots hold token 0 at position 0 (their outputs are never read)."""
        ids = completion_ids.new_zeros(U, self.S)  # (U, S)
        ids[self.runs, self.slots] = completion_ids[self.rows, self.cols]
        pos = positions.new_zeros(U, self.S)  # (U, S)
        pos[self.runs, self.slots] = positions[self.rows, self.cols]
        return ids, pos

    def mask(
        self,
        prompt_mask: torch.Tensor,
        implementation: str,
        dtype: torch.dtype,
        with_prompt: bool = False,
    ):
        """(U, 1, S, P + S): each packed token sees its prompt's real tokens, then its own answer's
        tokens up to itself; an unused slot sees the prompt only. `with_prompt`: (U, 1, P + S,
        P + S), the prompt's own rows first (causal over its real tokens; a padding position
        sees itself, so no row of the softmax is empty). Boolean for sdpa (True: seen), additive
        (0 or the dtype's minimum) for eager attention."""
        U, S, device = prompt_mask.size(0), self.S, prompt_mask.device
        segment = torch.full((U, S), -1, dtype=torch.long, device=device)  # (U, S): row or -1
        segment[self.runs, self.slots] = self.rows
        slot = torch.arange(S, device=device)
        causal = slot.unsqueeze(1) >= slot.unsqueeze(0)  # (S, S)
        same = segment.unsqueeze(2) == segment.unsqueeze(1)  # (U, S, S)
        own = same & causal & (segment >= 0).unsqueeze(2)  # (U, S, S)
        real = prompt_mask.bool()  # (U, P)
        seen = torch.cat([real.unsqueeze(1).expand(U, S, -1), own], dim=2)  # (U, S, P + S)
        if with_prompt:
            P = real.size(1)
            spot = torch.arange(P, device=device)
            earlier = spot.unsqueeze(1) >= spot.unsqueeze(0)  # (P, P)
            prompt_rows = (earlier & real.unsqueeze(1)) | torch.eye(
                P, dtype=torch.bool, device=device
            )
            hidden = torch.zeros(U, P, S, dtype=torch.bool, device=device)  # answers: not yet
            seen = torch.cat([torch.cat([prompt_rows, hidden], dim=2), seen], dim=1)
        seen = seen.unsqueeze(1)  # (U, 1, S or P + S, P + S)
        if implementation == "sdpa":
            return seen
        additive = torch.zeros(seen.shape, dtype=dtype, device=device)
        return additive.masked_fill_(~seen, torch.finfo(dtype).min)
