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
PACK_BELOW of the padded pass's: answers of even length that share nothing stay padded.
Measured on SmolLM2 (bench/packed_passes.py): the reference pass and forward/backward ×1.30.

Answers that begin alike share their beginning in the pack: a group's sampled answers agree
token for token until they part (the demo's 8 answers to one problem, until a carry they
disagree on), and a token that several answers begin with runs once, in one slot that each of
their later tokens sees (the block mask is the prefix tree's ancestry). On the demo's steps the
packed row holds about a fifth of the groups' tokens, so its answers now pack too: its update
took 12.7 s in place of 29.1 (bench/README.md, `twin_rows.py`).

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
TREE = True  # answers share the beginnings they have in common (False: one chain each; bench)
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
    state comes from. U distinct prompts (runs), N rows, C completion columns, S packed columns.

    A packed token is a node of its run's prefix tree: rows of a run whose answers begin alike
    (the same tokens up to and including column t) share the node of column t, which runs once
    and is seen by every later token of each of them. Rows that share nothing make one chain of
    nodes each, as in a plain pack."""

    rows: torch.Tensor  # (T,) a row whose input token this node is
    cols: torch.Tensor  # (T,) its completion column (the node's depth)
    runs: torch.Tensor  # (T,) its packed row (the row's prompt run)
    slots: torch.Tensor  # (T,) its column in the packed row
    # (M,) per kept (row, column), row-major: its index in [prompt ends (U) | packed (U × S)]
    source: torch.Tensor
    S: int
    sees: torch.Tensor  # (U, S, S) bool: slot i sees slot j (j is i or one of its ancestors)

    @staticmethod
    def build(
        keep: torch.Tensor,  # (N, C) bool: completion positions scored
        first: torch.Tensor,  # (U,) first row of each prompt run
        owner: torch.Tensor,  # (N,) prompt run of each row (runs are consecutive rows)
        P: int,
        costs: tuple[float, float],
        with_prompt: bool = False,
        scores_kept: bool = False,
        tokens: torch.Tensor | None = None,  # (N, C) the completions: shared beginnings
    ) -> PackPlan | None:
        """The plan, or None where packing would not pay or the masks are not runs from column 0.
        Each row's hidden state for column 0 comes from its prompt's last position; for column
        t ≥ 1 from its input token t - 1, so a row of length n puts n - 1 tokens in the pack,
        fewer where it begins as another row of its run does (`tokens`; None: no two rows
        share a node). `with_prompt`: the prompt goes through in the same pass (no key/value
        cache), in the packed row and, padded, in every row. `scores_kept`: the attention keeps
        every score (eager attention), so the packed pass may not hold more of them than the
        padded one. Built on the CPU (bookkeeping of a few thousand entries), moved to
        `keep`'s device."""
        device = keep.device
        keep, first, owner = keep.cpu(), first.cpu(), owner.cpu()
        N, C = keep.shape
        U = first.numel()
        lengths = keep.sum(1)  # (N,)
        columns = torch.arange(C)  # (C,)
        if not torch.equal(keep, columns.unsqueeze(0) < lengths.unsqueeze(1)):
            return None  # not a run of 1s from column 0
        inputs = (lengths - 1).clamp(min=0)  # (N,) input tokens of each row
        T = int(inputs.max()) if N else 0
        if T == 0:
            return None
        valid = columns[:T].unsqueeze(0) < inputs.unsqueeze(1)  # (N, T)
        node = _prefix_nodes(None if tokens is None else tokens[:, :T].cpu(), owner, valid)
        is_node = node == torch.arange(N).unsqueeze(1)  # (N, T) the row that runs the node
        is_node &= valid
        per_run = torch.zeros(U, dtype=torch.long).index_add_(0, owner, is_node.sum(1))  # (U,)
        S = int(per_run.max())
        per_token, per_key = costs
        ahead = P if with_prompt else 0  # tokens of the pass before the answers
        padded = N * (ahead + max(C - 1, 0)) * (per_token + per_key * (P + C - 1))
        cost = U * (ahead + S) * (per_token + per_key * (P + S))
        if S > MAX_PACKED or cost >= PACK_BELOW * padded:
            return None
        if scores_kept and U * (ahead + S) * (P + S) > N * (ahead + C - 1) * (P + C - 1):
            return None
        # Nodes in row-major order: a run's nodes are consecutive, so a node's slot is its
        # index less the index of its run's first node.
        rows, cols = is_node.nonzero(as_tuple=True)  # (Tn,), (Tn,)
        runs = owner[rows]  # (Tn,)
        index = torch.full((N, T), -1, dtype=torch.long)
        index[rows, cols] = torch.arange(rows.numel())
        run_start = torch.cumsum(per_run, 0) - per_run  # (U,) index of each run's first node
        slots = torch.arange(rows.numel()) - run_start[runs]  # (Tn,)
        slot_of = torch.where(valid, slots[index.gather(0, node).clamp(min=0)], -1)
        # ^ (N, T): the slot of row r's input token t (index[node[r, t], t])
        sees = _ancestry(slot_of, owner, U, S)
        kept_rows, kept_cols = keep.nonzero(as_tuple=True)  # (M,) row-major
        before = slot_of[kept_rows, (kept_cols - 1).clamp(min=0)]  # (M,)
        from_pack = U + owner[kept_rows] * S + before  # (M,)
        source = torch.where(kept_cols == 0, owner[kept_rows], from_pack)  # (M,)
        return PackPlan(
            rows.to(device), cols.to(device), runs.to(device), slots.to(device),
            source.to(device), S, sees.to(device),
        )  # fmt: skip

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
        """(U, 1, S, P + S): each packed token sees its prompt's real tokens, then the tokens
        its answer(s) begin with up to itself (its node and the nodes above it); an unused slot
        sees the prompt only. `with_prompt`: (U, 1, P + S, P + S), the prompt's own rows first
        (causal over its real tokens; a padding position sees itself, so no row of the softmax
        is empty). Boolean for sdpa (True: seen), additive (0 or the dtype's minimum) for eager
        attention."""
        U, S, device = prompt_mask.size(0), self.S, prompt_mask.device
        real = prompt_mask.bool()  # (U, P)
        seen = torch.cat([real.unsqueeze(1).expand(U, S, -1), self.sees], dim=2)  # (U, S, P + S)
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


def _prefix_nodes(tokens: torch.Tensor | None, owner: torch.Tensor, valid: torch.Tensor):
    """(N, T): for row r's input token t, the first row of its run whose answer begins with the
    same t + 1 tokens (r itself when none does, and always when `tokens` is None); anything
    where `valid` (N, T) is False. Compared run by run (a run's rows are consecutive), so the
    comparison takes G × G × T of memory, not N × N × T."""
    N, T = valid.shape
    node = torch.arange(N).unsqueeze(1).expand(N, T).contiguous()  # (N, T)
    if tokens is None:
        return node
    starts = torch.nonzero(torch.diff(owner, prepend=owner[:1] - 1)).flatten().tolist()
    for a, b in zip(starts, [*starts[1:], N]):
        if b - a < 2:
            continue
        x, ok = tokens[a:b], valid[a:b]  # (g, T)
        same = (x.unsqueeze(1) == x.unsqueeze(0)) & ok.unsqueeze(1) & ok.unsqueeze(0)  # (g, g, T)
        alike = same.to(torch.uint8).cummin(dim=2).values  # the same up to and with t
        node[a:b] = a + alike.argmax(dim=1)  # (g, T) the run's first such row
    return node


def _ancestry(slot_of: torch.Tensor, owner: torch.Tensor, U: int, S: int) -> torch.Tensor:
    """(U, S, S) bool: slot i of a run's packed row sees slot j when j holds one of the tokens
    its answer begins with, up to i itself. `slot_of` (N, T): the slot of row r's input token t
    (-1 past its end). Filled column by column: a node sees what its parent sees, and itself."""
    sees = torch.zeros(U, S, S, dtype=torch.bool)
    N, T = slot_of.shape
    for t in range(T):
        live = slot_of[:, t] >= 0  # (N,)
        if not bool(live.any()):
            break
        run, slot = owner[live], slot_of[live, t]  # (n,), (n,)
        if t > 0:
            sees[run, slot] = sees[run, slot_of[live, t - 1]]
        sees[run, slot, slot] = True
    return sees
