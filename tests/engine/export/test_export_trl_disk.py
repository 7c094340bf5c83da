"""The TRL export and the disk (issue 26 §2): the project copies the built-in model into model/,
so its free-space check counts the model's bytes, and a disk that fills up during the copy gets
the exports' full-disk message, not shutil's list of failed files. Tried for real on small tmpfs
file systems in a private mount namespace (as test_export_disk.py; where mounting is not
permitted the test skips and says why), through the real command line:

- a 2 MB disk: refused before anything is written (the demo model alone is 6.1 MB), naming the
  size needed and the size free;
- a 64 MB disk with 8 inodes: the check passes, the data files are written and the model's
  third file fails with ENOSPC: the command says the disk filled up, and removes what it wrote.
Both exit 2, one paragraph, no traceback, nothing left on the disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.export.plan import plan_export, shipped_builtin_model
from tests.support.export_runs import small_demo
from tests.support.hazards import ROOT, mount_problem, unshare

DRIVER = r"""
import json, os, subprocess, sys
settings, small, few_inodes, out_json = sys.argv[1:5]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", small], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=8", "tmpfs", few_inodes],
               check=True)
result = {}
for name, disk in (("small", small), ("few_inodes", few_inodes)):
    p = subprocess.run([sys.executable, "-m", "grpo_desktop", "export", settings, "--format",
                        "trl", "--out", os.path.join(disk, "out"), "--quiet"],
                       capture_output=True, text=True)
    result[name] = {"code": p.returncode, "err": p.stderr, "out": p.stdout,
                    "left": sorted(os.listdir(disk))}
with open(out_json, "w") as fh:
    json.dump(result, fh)
"""


def test_the_trl_plan_says_the_size_the_project_takes(tmp_path):
    """The size the Export dialog shows for a TRL project is what the export writes, byte for
    byte: the built-in model it copies, the data files, the scripts (issue 27 §5)."""
    from grpo_desktop.engine.export.pipeline import export
    from grpo_desktop.engine.units import folder_bytes

    model = shipped_builtin_model("builtin:demo")
    if model is None:
        pytest.skip("the demo model is not shipped in this checkout")
    size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model))
    plan = plan_export(demo_config(), "trl")
    export(demo_config(), "trl", str(tmp_path / "demo"))
    assert plan.needed_bytes == plan.result_bytes == folder_bytes(tmp_path / "demo")
    assert plan.result_bytes > size  # the model's copy is in it
    hub_cfg = demo_config().replace(model={"name_or_path": "Qwen/Qwen2.5-0.5B"})
    hub = plan_export(hub_cfg, "trl")
    export(hub_cfg, "trl", str(tmp_path / "hub"))
    assert hub.result_bytes == folder_bytes(tmp_path / "hub") < size  # named, not copied


def test_a_full_disk_refuses_or_cleans_up_the_trl_export(tmp_path):
    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    if shipped_builtin_model("builtin:demo") is None:
        pytest.skip("the demo model is not shipped in this checkout")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(small_demo(lora=True).to_dict()))
    small, few = tmp_path / "small", tmp_path / "few-inodes"
    small.mkdir()
    few.mkdir()
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [str(settings), str(small), str(few), str(out)]
    subprocess.run(
        [*unshare(), sys.executable, "-c", DRIVER, *args], check=True, env=env, timeout=600
    )
    r = json.loads(out.read_text())
    before, during = r["small"], r["few_inodes"]
    assert before["code"] == 2 and before["out"] == "", before["err"]
    assert f"Not enough free space at {small}: the trl export needs about 6." in before["err"]
    assert "Nothing was written." in before["err"] and before["left"] == []
    assert during["code"] == 2 and during["out"] == "", during["err"]
    assert f"The disk at {few} filled up while the trl export was written" in during["err"]
    assert "(No space left on device)" in during["err"], during["err"]
    assert "what was written has been removed" in during["err"]
    assert "shutil" not in during["err"] and "[(" not in during["err"]
    assert during["left"] == []
    for err in (before["err"], during["err"]):
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
