"""What bench/gpu.py and bench/gpu_checks.py compute from a side-by-side run on a CUDA GPU.

`memory_bandwidth` times a device-to-device copy; `gpu_metrics` turns a vs_trl summary into decode
speed against the bandwidth floor (the weights read once per token) and the GPU targets. Shared by
both scripts, so neither imports the other. Try: `python bench/gpu.py --dry-run-cpu`.
"""

from __future__ import annotations

import statistics
import time

from _workload import Workload


def memory_bandwidth(device: str, mib: int = 1024, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy (read + write), best of `repeats`."""
    import torch

    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() / best


def gpu_metrics(res: dict, w: Workload, bandwidth: float) -> dict:
    """Decode speed and floor per side, and the targets, added to a vs_trl summary."""
    out = {"bandwidth_gb_s": bandwidth / 1e9}
    for side in ("ours", "trl"):
        runs = res["runs"][side]
        gen = statistics.median(t for r in runs for t in r["generate_times"])
        weight_bytes = runs[0].get("weight_bytes")
        step = gen / w.C
        floor = weight_bytes / bandwidth if weight_bytes else float("nan")
        out[side] = {
            "generate_s": gen,
            "decode_tokens_per_s": w.tokens_per_step / gen,
            "decode_step_ms": 1000 * step,
            "decode_floor_ms": 1000 * floor,
            "decode_vs_floor": step / floor,
            "weight_bytes": weight_bytes,
            "peak_cuda_mb": max(r.get("peak_cuda_mb", float("nan")) for r in runs),
        }
    out["step_ratio"] = res["ours"]["median_s"] / res["trl"]["median_s"]
    out["memory_ratio"] = out["ours"]["peak_cuda_mb"] / out["trl"]["peak_cuda_mb"]
    out["targets"] = {
        "step_time <= 0.5 x TRL": out["step_ratio"] <= 0.5,
        "peak memory <= TRL": out["memory_ratio"] <= 1.0,
        "decode within 5 x floor": out["ours"]["decode_vs_floor"] <= 5.0,
    }
    return out
