"""Replay a StaticDecoder's step as one captured CUDA graph per token, checked against eager.

`GraphedDecode(decoder)` is what the sampler's static path calls per token: it copies the drawn
ids into the decoder's static input, runs the step and advances the slot counter. The first call
warms the step up, captures it into a `torch.cuda.CUDAGraph`, replays it once and compares the
logits with the eager step's on the same inputs (the step is idempotent, decode_static.py); the
second token compares again, since a graph that baked in a value of the first token passes the
first check only. From then on a token is one `replay()` instead of thousands of dispatched
operations. When capture raises or a check fails (`TOLERANCE`: bf16 rounding, finite logits) it
logs one warning and runs the same static step eagerly for the rest of the call; `GRAPHS =
False` switches graphs off. `close()` hands the graph's memory back for the training pass.
Sampling stays outside the graph, in the sampler, so its random numbers are the eager path's.

Try it: tests/engine/sampling/test_decode_static.py (on the CPU capture fails, so the fallback
runs for real, and `EagerReplay` stands in for a graph); on CUDA, bench/decode_overhead.py.
"""

from __future__ import annotations

import logging

import torch

from grpo_desktop.engine.sampling.decode_static import StaticDecoder

GRAPHS = True  # capture the decode step as a CUDA graph on CUDA (False: eager static step)
TOLERANCE = 1 / 64  # replayed vs eager logits, relative to their largest magnitude (4 bf16 ulps)
WARMUP = 2  # eager steps on a side stream before capture

log = logging.getLogger(__name__)


class CudaGraph:
    """Capture and replay of one function on CUDA (torch.cuda.CUDAGraph)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.graph = torch.cuda.CUDAGraph()  # raises where torch has no CUDA

    def warm_up(self, fn) -> torch.Tensor:
        """Run fn WARMUP times on a side stream; the last result (on the main stream's order)."""
        # cuBLAS handles and workspaces get made here, outside the capture, which cannot make them.
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP):
                out = fn()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return out

    def capture(self, fn) -> torch.Tensor:
        """Record fn's kernels (none run); its output tensor is the graph's static output."""
        # thread_local: other threads using CUDA meanwhile do not break the capture.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            out = fn()
        return out

    def replay(self) -> None:
        self.graph.replay()

    def release(self) -> None:
        self.graph.reset()
        torch.cuda.empty_cache()  # the pool's blocks go back to the driver for the training pass


class EagerReplay:
    """The CPU stand-in for CudaGraph in tests: `replay()` runs the captured function again and
    copies its result into the static output, so everything around the graph (static input,
    static output, the check, advancing outside the step) runs as it does on CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.fn = None
        self.out: torch.Tensor | None = None

    def warm_up(self, fn) -> torch.Tensor:
        for _ in range(WARMUP):
            out = fn()
        return out

    def capture(self, fn) -> torch.Tensor:
        self.fn = fn
        self.out = fn().clone()
        return self.out

    def replay(self) -> None:
        self.out.copy_(self.fn())

    def release(self) -> None:
        self.fn = self.out = None


BACKEND = CudaGraph  # what GraphedDecode captures with unless told (tests: EagerReplay)


def agrees(graphed: torch.Tensor, eager: torch.Tensor) -> tuple[bool, float]:
    """(replayed logits equal the eager ones within TOLERANCE of their scale, largest
    difference relative to that scale). One host sync; called once per capture."""
    scale = eager.float().abs().max().clamp(min=1.0)  # ()
    diff = (graphed.float() - eager.float()).abs().max() / scale  # ()
    value = float(diff)
    return bool(torch.isfinite(graphed).all()) and value <= TOLERANCE, value


class GraphedDecode:
    """Callable tokens (N,) -> next-token logits (N, V) for the sampler's loop, replaying a
    captured graph of `decoder.step()` when `graphs` and the check allow, else the eager step.
    `backend` makes the capture (BACKEND: CudaGraph; EagerReplay in tests). `mode` says what ran:
    "graph", "eager" (graphs off or not tried yet) or "eager (fallback)"."""

    def __init__(self, decoder: StaticDecoder, graphs: bool | None = None, backend=None):
        self.decoder = decoder
        self.backend = backend or BACKEND
        self.wanted = GRAPHS if graphs is None else graphs
        self.graph = None
        self.out: torch.Tensor | None = None  # (N, V) the graph's static output
        self.mode = "eager"
        self.tried = False
        self.recheck = False  # compare the next replay with the eager step too
        self.difference: float | None = None  # relative difference found by the check

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        d.check_room()
        d.tokens.copy_(tokens)  # (N,) into the static input
        if self.graph is not None and self.recheck:
            logits = self._recheck()
        elif self.graph is not None:
            self.graph.replay()
            logits = self.out  # (N, V)
        elif self.wanted and not self.tried:
            logits = self._capture()
        else:
            logits = d.step()  # (N, V)
        d.advance()
        return logits

    def _capture(self) -> torch.Tensor:
        """Warm up, capture, replay once and check; the logits of this token either way."""
        self.tried = True
        step = self.decoder.step
        graph = None
        try:
            graph = self.backend(self.decoder.tokens.device)
            eager = graph.warm_up(step).clone()  # (N, V)
            out = graph.capture(step)
            graph.replay()
            ok, self.difference = agrees(out, eager)
            if not ok:
                raise RuntimeError(
                    f"replayed logits differ from the eager step's by {self.difference:.3g} "
                    f"of their scale (tolerance {TOLERANCE:.3g})"
                )
        except Exception as exc:  # any failure of capture or check: decode eagerly
            if graph is not None:
                _release(graph)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("Decoding without a CUDA graph (%s): %s", type(exc).__name__, reason)
            self.mode = "eager (fallback)"
            return step()
        self.graph, self.out, self.mode, self.recheck = graph, out, "graph", True
        return out

    def _recheck(self) -> torch.Tensor:
        """The second token: the first replay on inputs the capture never saw, compared with the
        eager step on the same inputs (it rewrites the same slot with the same values). Catches
        a graph that baked in a value of the first token. The eager logits either way."""
        self.recheck = False
        self.graph.replay()
        graphed = self.out.clone()  # (N, V)
        eager = self.decoder.step()  # (N, V)
        ok, self.difference = agrees(graphed, eager)
        if not ok:
            log.warning(
                "Decoding without a CUDA graph: on the second token its logits differ from the "
                "eager step's by %.3g of their scale (tolerance %.3g)",
                self.difference,
                TOLERANCE,
            )
            self.close()
            self.mode = "eager (fallback)"
        return eager

    def close(self) -> None:
        """Drop the graph and its memory pool (the static output with it)."""
        if self.graph is not None:
            graph, self.graph, self.out = self.graph, None, None
            _release(graph)


def _release(graph) -> None:
    try:
        graph.release()
    except Exception as exc:  # a capture that failed half-way may refuse to reset
        log.debug("releasing the decode graph: %s", exc)
