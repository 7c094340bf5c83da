"""Rows that have said the same thing so far are stepped once: a group's answers share their
beginnings, and the decoder need not run a beginning eight times.

A group's G rows share a prompt, and a model that knows what it is doing samples the same next
token in all of them most of the time: the demo's answers agree token for token up to the first
carry they disagree on, then along each branch up to the next. Two rows with the same prompt
and the same tokens so far (twins) have the same keys and values and the same next-token
distribution, so the decoder needs only one of them. On the demo's 100 steps only 17-27 % of the
live rows had a history of their own (bench/README.md, `twin_rows.py`).

`TwinRows` keeps, for each live row of the sampler, the decoder row (slot) that holds its
history. After each token, rows whose slot and new token agree share a slot again; a slot whose
rows drew different tokens forks (its keys and values are copied to a new decoder row: the
decoder's `keep` with that row repeated); a slot whose rows all ended is dropped. Each row still
draws with its own random number from its slot's logits (row i's logits are its slot's row,
copied), so the tokens are those the sampler draws without twins, bit for bit where the
decoder's products give a row the same numbers whatever the other rows are (the CPU's lean
step: tests/engine/sampling/test_twin_rows.py checks it, as test_live_rows.py does for dropping
ended rows).

Once every row still going has a history of its own (an untrained model's rows part at their
first token) nothing more can be shared, and the sampler goes on without twins: a decode that
shares nothing pays one comparison of its first tokens.

Only for decoders that keep their own positions and can select rows (decoders.LeanDecode).
"""

from __future__ import annotations

import torch


class TwinRows:
    """Which decoder row (slot) each of the sampler's live rows reads its logits from.

    `rows(logits)`: the decoder's logits (D, V) spread to the live rows (K, V); `advance(nxt,
    finished)`: after the rows drew `nxt` (K,), the tokens (D',) the decoder steps next, its rows
    first re-cut with `keep` (forks and ended slots), or None when nothing is shared any more;
    `keep_rows(kept)`: the sampler dropped rows of its own (ended ones)."""

    def __init__(self, decoder, first: torch.Tensor, owner: torch.Tensor) -> None:
        """`first` (U,): the first row of each run of rows sharing a prompt, `owner` (N,): each
        row's run (sampler.prompt_runs). The decoder starts with all N rows (the prefill's
        cache spread to them); each row reads the first row of its run."""
        self.decoder = decoder
        self.slot = first.index_select(0, owner)  # (N,) decoder row of each row
        self.D = owner.numel()  # decoder rows now
        self.aligned = True  # decoder row i holds live row i's history (no row re-cut yet)

    def rows(self, logits: torch.Tensor) -> torch.Tensor:
        """The live rows' logits (K, V) from the decoder's (D, V)."""
        return logits.index_select(0, self.slot)

    def keep_rows(self, kept: torch.Tensor) -> None:
        """Only rows `kept` (K',) of the K live rows go on."""
        self.slot = self.slot.index_select(0, kept)
        self.aligned = False

    def advance(self, nxt: torch.Tensor, finished: torch.Tensor) -> torch.Tensor | None:
        """Tokens (D',) for the decoder's next step, after the live rows drew `nxt` (K,) and
        `finished` (K,) says which have ended (at least one has not): rows of one slot that drew
        the same token share a decoder row, in the order of (slot, token). None once every row
        still going has a history of its own (histories only part, so nothing is shared from
        then on): the decoder's rows are then the K live rows again, re-cut if they were not,
        and the sampler goes on without twins."""
        V = int(nxt.max()) + 1
        key = self.slot * V + nxt  # (K,) slot and token in one number
        key = key.masked_fill(finished, -1)  # ended rows need no decoder row
        distinct, inverse = torch.unique(key, sorted=True, return_inverse=True)  # (D'+e,), (K,)
        ended = int(distinct[0]) < 0
        if ended:
            distinct, inverse = distinct[1:], (inverse - 1).clamp(min=0)
        if distinct.numel() == finished.numel() - int(finished.sum()):  # all apart
            if not self.aligned:
                self.decoder.keep(self.slot)  # row i's history (an ended row's: any row's)
            return None
        parents = distinct // V  # (D',) the slot each new decoder row continues
        if parents.numel() != self.D or not bool(
            (parents == torch.arange(self.D, device=parents.device)).all()
        ):
            self.decoder.keep(parents)  # forks repeat a row, ended slots are left out
            self.aligned = False
        self.slot, self.D = inverse, parents.numel()  # ended rows point anywhere: never read
        return distinct - parents * V  # (D',) the tokens
