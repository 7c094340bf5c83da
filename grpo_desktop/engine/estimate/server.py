"""The "Will it fit?" estimate as a long-lived child process of the app (one JSON line in, one
out), so that torch, transformers and any CUDA query stay out of the GUI process.

Each request line is {"id": n, "config": TrainConfig dict, "free_bytes": int | null,
"device": dict | null}; each answer line is {"id": n, "result": estimate dict} or
{"id": n, "error": "one readable message"}. `device` is what the app's device probe found:
{"kind": "cpu"} or {"kind": "cuda", "name", "free_bytes", "total_bytes", "major", "minor",
"multi_processor_count", "clock_rate", "memory_clock_rate", "memory_bus_width"}; with a CUDA
device's facts given this process queries no CUDA (no context, no GPU memory held for the
session). Without `device` it is `estimate_run`'s own choice.

No request can end it (a bad line is an error answer); end of input ends it. It does not queue
or drop requests: the app sends one at a time (ui/panels/estimate_process.py). Try it:
    echo '{"id": 1, "config": {}}' | python -m grpo_desktop.engine.estimate.server
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, TextIO

GPU_NEEDED = ("major", "minor", "multi_processor_count", "name", "total_bytes")
GPU_OPTIONAL = ("clock_rate", "memory_clock_rate", "memory_bus_width")  # not in every torch
BARE_ERRORS = (KeyError, AttributeError, TypeError, IndexError, ZeroDivisionError)


def estimate_args(cfg_device: str, device: dict | None, free_bytes: int | None) -> dict:
    """estimate_run's keyword arguments for the config's device choice ("auto", "cpu",
    "cuda") and the probe's `device` facts; `free_bytes` given wins over the probe's."""
    if not device or cfg_device == "cpu":
        return {"free_bytes": free_bytes}
    kind = device.get("kind")
    if kind == "cuda" and all(k in device for k in GPU_NEEDED):
        gpu = {k: device[k] for k in (*GPU_NEEDED[:3], *GPU_OPTIONAL) if k in device}
        gpu.update(name=device["name"], total_memory=int(device["total_bytes"]))
        free = free_bytes if free_bytes is not None else device.get("free_bytes")
        return {"device": "cuda", "gpu": gpu, "free_bytes": free}
    if kind == "cpu" and cfg_device == "auto":  # no GPU here: the CPU, without asking CUDA
        return {"device": "cpu", "free_bytes": free_bytes}
    return {"free_bytes": free_bytes}  # device cuda without a GPU: estimate_run says so


def answer(line: str) -> dict[str, Any]:
    """The answer to one request line (never raises)."""
    ident = None
    try:
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"the request is not JSON ({exc})") from None
        if not isinstance(request, dict):
            raise ValueError("the request is not a JSON object")
        ident = request.get("id")
        from grpo_desktop.engine.config import TrainConfig
        from grpo_desktop.engine.estimate.fit import estimate_run

        if not isinstance(request.get("config"), dict):
            raise ValueError("the request has no settings (its 'config' is not an object)")
        cfg = TrainConfig.from_dict(request["config"])
        free = request.get("free_bytes")
        kwargs = estimate_args(cfg.model.device, request.get("device"), free)
        return {"id": ident, "result": estimate_run(cfg, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - every failure is an answer, never the end
        text = str(exc).strip()
        if not text:
            text = f"the estimate failed ({type(exc).__name__})"
        elif isinstance(exc, BARE_ERRORS):  # a programming error: say its kind too
            text = f"the estimate failed ({type(exc).__name__}: {text})"
        return {"id": ident, "error": text}


def serve(stdin: TextIO, stdout: TextIO) -> None:
    """Answer each line of `stdin` on `stdout` until end of input; whatever the estimate prints
    goes to stderr, so stdout holds only answers."""
    while True:
        line = stdin.readline()
        if not line:
            return
        if not line.strip():
            continue
        with contextlib.redirect_stdout(sys.stderr):
            reply = answer(line)
        try:
            text = json.dumps(reply)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"id": reply.get("id"), "error": f"unreadable result ({exc})"})
        stdout.write(text + "\n")
        stdout.flush()


def main() -> int:
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
