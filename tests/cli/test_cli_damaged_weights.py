"""Damaged weights in a real checkpoint, met the way a user meets them (issue 26 §2): the real
command in a subprocess on a real one-step run, the damage written by hand.

- `eval` on a checkpoint whose weights are a pickle (pytorch_model.bin holding a Python object)
  refuses it with the app's pickle wording, naming the checkpoint and file: exit 2, one line, no
  traceback, and the pickle's code did not run;
- merged and GGUF export of a checkpoint with a tensor saved 3×5 (a full run's embedding, a LoRA
  run's lora_A): exit 2 naming the checkpoint, the tensor, the expected and the found shape; no
  traceback, nothing written.
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


def _with_a_wrong_shape(run_dir: str, dest: str, file: str, pick: str) -> tuple[str, str]:
    """A copy of the run whose checkpoint tensor (the first whose name holds `pick`) is saved
    3×5: (the copy's checkpoint folder, the tensor's name)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(run_dir, dest)
    step = sorted(os.listdir(os.path.join(dest, "checkpoints")))[-1]
    path = os.path.join(dest, "checkpoints", step, file)
    tensors = load_file(path)
    key = sorted(k for k in tensors if pick in k)[0]
    tensors[key] = torch.zeros(3, 5, dtype=tensors[key].dtype)
    save_file(tensors, path, metadata={"format": "pt"})
    return os.path.dirname(os.path.dirname(path)), key


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> str:
    return train_run(small_demo(lora=True), str(tmp_path_factory.mktemp("damaged") / "lora"))


@pytest.mark.parametrize("fmt", ["merged", "gguf"])
def test_export_refuses_a_checkpoint_with_a_tensor_of_the_wrong_shape(run, lora_run, fmt, tmp_path):
    cases = [
        (run, "model/model.safetensors", "embed_tokens", "107×192"),
        (lora_run, "adapter/adapter_model.safetensors", "lora_A", "4×512"),
    ]
    for n, (source, file, pick, expected) in enumerate(cases):
        damaged = str(tmp_path / f"run{n}")
        checkpoint, key = _with_a_wrong_shape(source, damaged, file, pick)
        before = tree(damaged)
        out = tmp_path / f"out{n}"
        code, err = cli("export", damaged, "--format", fmt, "--out", str(out), "--quiet")
        refused(
            code,
            err,
            f"The checkpoint {checkpoint} is damaged: {file}",
            f"the tensor {key.replace('.default.', '.')} has shape 3×5",
            f"the model needs {expected}",
        )
        assert not out.exists()
        assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temporary export
        assert tree(damaged) == before
