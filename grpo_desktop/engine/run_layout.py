"""Where a run folder keeps its checkpoints, readable without torch.

    RUN/checkpoints/step-NNNNNNNN/trainer_state.json    written last: the checkpoint is whole

`engine.checkpoint` writes and reads checkpoints (and needs torch); this module only finds them,
so the GUI and the session layer can tell where a run would continue from without loading torch.
"""

from __future__ import annotations

import os

STATE_FILE = "trainer_state.json"


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first."""
    root = checkpoints_dir(run_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("step-") and os.path.isfile(os.path.join(path, STATE_FILE)):
            try:
                found.append((int(name[5:]), path))
            except ValueError:
                continue
    return sorted(found)


def latest_checkpoint(run_dir: str) -> str | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None
