"""Damaged weights in a real checkpoint, met the way a user meets them (issue 26 §2): the real
command in a subprocess on a real one-step full-weights run, the damage written by hand.

- `eval` on a checkpoint whose weights are a pickle (pytorch_model.bin holding a Python object)
  refuses it with the app's pickle wording, naming the checkpoint and file: exit 2, one line, no
  traceback, and the pickle's code did not run;
- merged and GGUF export of a checkpoint whose embedding has the wrong shape: exit 2 naming the
  checkpoint, the tensor, the expected and the found shape; no traceback, nothing written.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from tests.support.export_runs import small_demo, train_run
from tests.support.hazards import cli, tree


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> str:
    return train_run(small_demo(lora=False), str(tmp_path_factory.mktemp("damaged") / "run"))


def weights_dir(run_dir: str) -> str:
    step = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    return os.path.join(run_dir, "checkpoints", step, "model")


def refused(code: int, err: str, *named: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for text in named:
        assert text in err, (text, err)


class _Marker:
    """Unpickling this would create the marker file: proof that nothing ran."""

    path = ""

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_eval_refuses_a_checkpoint_whose_weights_are_a_pickle(run, tmp_path):
    from safetensors.torch import load_file

    damaged = str(tmp_path / "run")
    shutil.copytree(run, damaged)
    model = weights_dir(damaged)
    tensors = load_file(os.path.join(model, "model.safetensors"))
    marker = _Marker()
    marker.path = str(tmp_path / "code-ran")
    torch.save(dict(tensors, note=marker), os.path.join(model, "pytorch_model.bin"))
    os.remove(os.path.join(model, "model.safetensors"))
    checkpoint = os.path.dirname(model)
    before = tree(damaged)
    for target in (damaged, checkpoint):
        code, err = cli("eval", target, "--n", "2", "--no-sample")
        refused(
            code,
            err,
            f"The checkpoint {checkpoint} is damaged: model/pytorch_model.bin",
            "Python objects other than tensors and numbers",
            "unpickling them could run code",
        )
    assert not os.path.exists(marker.path)
    assert tree(damaged) == before
