"""A full disk while exporting, tried for real on small
tmpfs file systems mounted in a private mount namespace (`unshare -rm`, as test_disk_full.py
does; where mounting is not permitted the test skips and says why):

- a 2 MB disk: the merged export of the demo (6.1 MB) is refused before anything is written,
  with the size needed and the size free;
- a 64 MB disk with only 5 inodes: the free-space check passes, the weights are written, and the
  next file fails with ENOSPC (the kernel's "No space left on device" when a tmpfs runs out of
  inodes): the command says the disk filled up while writing, and removes what it wrote.
Both through the real command line, exit 2, one paragraph, nothing left on the disk. The first
case also runs in the normal suite (test_export.py, on the module's run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.export_runs import small_demo, train_run
from tests.support.hazards import ROOT, mount_problem, unshare

DRIVER = r"""
import json, os, subprocess, sys
run, small, few_inodes, out_json = sys.argv[1:5]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", small], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=5", "tmpfs", few_inodes],
               check=True)
result = {}
for name, disk in (("small", small), ("few_inodes", few_inodes)):
    p = subprocess.run([sys.executable, "-m", "grpo_desktop", "export", run, "--format", "merged",
                        "--out", os.path.join(disk, "out"), "--quiet"],
                       capture_output=True, text=True)
    result[name] = {"code": p.returncode, "err": p.stderr, "out": p.stdout,
                    "left": sorted(os.listdir(disk))}
with open(out_json, "w") as fh:
    json.dump(result, fh)
"""


@pytest.mark.slow  # two CLI processes and a training run: 40 s at load 13
def test_a_full_disk_refuses_or_cleans_up(tmp_path):
    problem = mount_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    run = train_run(small_demo(lora=False), str(tmp_path / "run"))
    small, few = tmp_path / "small", tmp_path / "few-inodes"
    small.mkdir()
    few.mkdir()
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [run, str(small), str(few), str(out)]
    subprocess.run(
        [*unshare(), sys.executable, "-c", DRIVER, *args], check=True, env=env, timeout=600
    )
    r = json.loads(out.read_text())
    before, during = r["small"], r["few_inodes"]
    assert before["code"] == 2 and before["out"] == "", before["err"]
    assert (
        f"Not enough free space at {small}: the merged export needs about 6.1 MB" in (before["err"])
    )
    assert "Nothing was written." in before["err"] and before["left"] == []
    assert during["code"] == 2 and during["out"] == "", during["err"]
    assert f"The disk at {few} filled up while the merged export was written" in during["err"]
    assert (
        "No space left on device" in during["err"]
        and "what was written has been removed" in (during["err"])
    )
    assert during["left"] == []
    for err in (before["err"], during["err"]):
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
