"""Rows per pass of a GRPO step: a fixed number, or "auto" from the memory free now.

algorithm.micro_batch_size = 0 ("auto", the default) lets `RowsPerPass.choose` pick how many
completions each forward/backward pass takes: as many as fit, by memory.py's per-row estimate,
in the free memory of the device (CUDA: `mem_get_info` plus what torch's allocator holds unused;
CPU: the host's available RAM), and on the CPU no more than memory.CPU_PASS_BYTES of activations
per pass. A CUDA out-of-memory inside a step's passes makes grpo/step.py's `grpo_step` halve the
rows and redo the pass it was in (gradients of the failed pass are dropped, nothing is applied
twice); the halved number stays the most for the rest of the run. A fixed micro_batch_size is
used as it is, and an out-of-memory then ends the run with advice. The CPU has no
out-of-memory exception to catch (the kernel kills the process), so there "auto" relies on the
estimate alone. Does not run passes itself (grpo/step.py does).

Try it: tests/engine/estimate/test_micro_batch.py.
"""

from __future__ import annotations

import torch

from grpo_desktop.engine.estimate.memory import (
    ModelShape,
    activation_bytes_per_row,
    cpu_rows_cap,
    fixed_pass_bytes,
    row_tokens,
    rows_per_pass,
)
from grpo_desktop.engine.ops.fused_head import CHUNK_ELEMENTS, chunk_tokens
from grpo_desktop.engine.ops.host_memory import host_available_bytes

AUTO = 0


def free_bytes(device: torch.device) -> int | None:
    """Memory a pass can still use on `device`: for CUDA the driver's free memory plus what
    torch's caching allocator reserved but holds unused; host RAM for the CPU; None elsewhere."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(0, cached))
    if device.type == "cpu":
        return host_available_bytes()
    return None


class RowsPerPass:
    """The micro-batch setting of a run, and what out-of-memory errors taught it."""

    def __init__(self, setting: int = AUTO):
        self.setting = int(setting)
        self.cap: int | None = None  # most rows after a halving

    @property
    def auto(self) -> bool:
        return self.setting == AUTO

    def choose(self, policy, cfg, rows: int, prompt_tokens: int, completion_tokens: int) -> int:
        """Rows per pass for a step of `rows` completions of these lengths."""
        if not self.auto:
            return max(1, min(self.setting, rows))
        shape = ModelShape.from_config(policy.model.config)
        checkpointing = cfg.model.gradient_checkpointing
        G = cfg.algorithm.num_generations
        per_row = activation_bytes_per_row(
            shape,
            row_tokens(prompt_tokens, completion_tokens, G, checkpointing),
            torch.empty((), dtype=policy.dtype).element_size(),
            lora_r=cfg.lora.r if policy.uses_lora else 0,
            checkpointing=checkpointing,
        )
        fixed = fixed_pass_bytes(shape, chunk_tokens(shape.vocab, CHUNK_ELEMENTS))
        cpu = policy.device.type == "cpu"
        fit = rows_per_pass(
            free_bytes(policy.device),
            per_row,
            rows,
            group=G,
            fixed_bytes=fixed,
            max_rows=cpu_rows_cap(per_row, 1 if checkpointing else G) if cpu else None,
        )
        return fit if self.cap is None else min(fit, self.cap)

    def halve(self, rows: int) -> int | None:
        """After an out-of-memory with `rows` per pass: the rows to redo it with (and the cap
        from now on), or None when it cannot be halved (a fixed setting, or 1 row already)."""
        if not self.auto or rows <= 1:
            return None
        self.cap = (rows + 1) // 2
        return self.cap


def release_memory(policy, drop_gradients: bool) -> None:
    """After an out-of-memory: drop the failed pass's gradients (when it made some) and give the
    allocator's cached blocks back to the driver."""
    if drop_gradients:
        for p in policy.trainable_parameters():
            p.grad = None
    if policy.device.type == "cuda":
        torch.cuda.empty_cache()


def halving_on_oom(
    run, mb: int, rows: RowsPerPass, policy, notes: list, drop_gradients: bool = False
):
    """(run(mb), mb), halving mb and running again after a CUDA out-of-memory while the run's
    micro-batch setting is auto; the error itself when it cannot be halved."""
    while True:
        try:
            return run(mb), mb
        except torch.OutOfMemoryError:
            smaller = rows.halve(mb)
            if smaller is None:
                raise
        # Outside the except block: the error's frames (and the pass's tensors) are gone.
        release_memory(policy, drop_gradients)
        notes.append(
            f"Out of memory with {mb} completions per pass: redone with {smaller} (nothing "
            f"lost), and at most {smaller} per pass from now on. Setting the micro-batch size to "
            f"{smaller} skips this retry in later runs."
        )
        mb = smaller
