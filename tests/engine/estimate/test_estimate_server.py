"""The estimate child (engine/estimate/server.py) as the app runs it: a real
`python -m grpo_desktop.engine.estimate.server` process, one JSON line in and one out. It answers
with estimate_run's own dict, asks CUDA nothing when given a GPU's facts, and a bad request is
an error line after which it keeps serving; end of input ends it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.estimate.fit import estimate_run
from grpo_desktop.engine.estimate.server import estimate_args

GB = 10**9
# An RTX 4090 as the app's device probe reports it (ui/run/system_info.py), so the estimate's
# speed is computed from these, not measured: the same in any process.
GPU = {"kind": "cuda", "name": "RTX 4090", "total_bytes": 24 * 2**30, "free_bytes": 20 * 2**30,
       "major": 8, "minor": 9, "multi_processor_count": 128, "clock_rate": 2_520_000,
       "memory_clock_rate": 10_501_000, "memory_bus_width": 384}  # fmt: skip
SPEED_KEYS = ("seconds_per_step", "seconds_detail")  # from the CPU's measured speed


@pytest.fixture(scope="module")
def child():
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_desktop.engine.estimate.server"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip

    def ask(line: str) -> dict:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    yield ask
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0  # end of input: it exits by itself


def request(ident: int, cfg=None, **extra) -> str:
    return json.dumps({"id": ident, "config": (cfg or demo_config()).to_dict(), **extra})


def test_it_answers_the_demo_with_estimate_runs_dict(child):
    answer = child(request(1, free_bytes=8 * GB, device=None))
    assert set(answer) == {"id", "result"} and answer["id"] == 1
    here = json.loads(json.dumps(estimate_run(demo_config(), free_bytes=8 * GB)))
    got = answer["result"]
    for key in SPEED_KEYS:  # seconds: the CPU's matmul rate, timed in each process
        assert got.pop(key) and here.pop(key)
    for key in ("flops", "bandwidth"):
        assert got["device"].pop(key) > 0 and here["device"].pop(key) > 0
    assert got == here
    assert got["model"]["params"] == 1_595_136 and got["device"]["kind"] == "cpu"


def test_given_a_gpus_facts_it_asks_cuda_nothing_and_matches_in_process(child):
    # "auto" with the probe's GPU: estimated for that GPU from the facts alone (on a machine
    # without CUDA a query would fail). The speed comes from the facts too, so all of it is equal.
    answer = child(request(2, device=GPU))
    here = estimate_run(demo_config(), **estimate_args("auto", GPU, None))
    assert answer == {"id": 2, "result": json.loads(json.dumps(here))}
    device = answer["result"]["device"]
    assert device["name"] == "RTX 4090" and device["free_bytes"] == 20 * 2**30
    assert answer["result"]["assumed"]["dtype"] == "bfloat16"  # compute capability 8.9


def test_a_bad_request_is_an_error_line_and_it_keeps_serving(child, tmp_path):
    assert child("this is not json")["error"].startswith("the request is not JSON")
    assert child('{"id": 4}') == {
        "id": 4, "error": "the request has no settings (its 'config' is not an object)"
    }  # fmt: skip
    missing = demo_config().replace(model={"name_or_path": str(tmp_path / "no-such-model")})
    error = child(request(5, missing))["error"]
    assert "no-such-model" in error and "Traceback" not in error
    assert child(request(6, free_bytes=8 * GB))["result"]["model"]["params"] == 1_595_136


def test_estimate_args_follow_the_config_and_the_probe():
    cpu = {"kind": "cpu"}
    assert estimate_args("auto", None, 5) == {"free_bytes": 5}  # no probe: estimate_run decides
    assert estimate_args("auto", cpu, None) == {"device": "cpu", "free_bytes": None}
    assert estimate_args("cpu", GPU, None) == {"free_bytes": None}  # the config says CPU
    assert estimate_args("cuda", cpu, None) == {"free_bytes": None}  # estimate_run: "no GPU"
    gpu = estimate_args("cuda", GPU, 7 * GB)
    assert gpu["device"] == "cuda" and gpu["free_bytes"] == 7 * GB  # given wins over probed
    assert gpu["gpu"]["total_memory"] == 24 * 2**30 and gpu["gpu"]["major"] == 8
