"""The decode step's fused CPU kernels (native_decode.cpp), compiled on this machine once and cached.

A decode step of a small model on the CPU is mostly small operations: per layer and token the
rotary embedding, two key/value writes, two batched products, a scaling, a mask, a softmax and
SwiGLU's SiLU and product, each a call and a pass over memory (the keys' transposed write alone
touches a cold cache line per element). native_decode.cpp does the rotary embedding, the writes
and the attention in one pass per row and key/value head (`rope_attend`), SiLU with its
product in one (`silu_mul`) and RMSNorm in one (`rms_norm`; torch's CPU rms_norm is five
operations). On `bench/vs_trl.py --quick`'s 3M model that took the generation from 0.22-0.23
to 0.18-0.19 s a step, the demo's from 0.18 to 0.14 (bench/README.md, "Fused decode kernels").
The attention sums blocks of up to 64 scores (and outputs) in registers for all the query
heads of a key/value head at once, each term in the order of a plain loop (bench/README.md,
sessions 26 and 30). `linear` runs the step's matrix products: MKL's, tuned for many rows, ran a
decode's 32 at 80-120 GFLOP/s on two Zen 4 cores, these at 150-180 (bench/README.md, "session
27"). `decode_step` runs all of a step's layers and its output layer in one call, each thread
taking its rows through every layer, and lets a group's rows read one copy of their prompt's
keys and values (session 30).

torch's CPU build cannot fuse them itself without a compiler, so the kernels are compiled with
the machine's C++ compiler (ops/native_build.py) the first time a decode needs them (about 6 s on
a 2-core Xeon; `-march=native`, so the build is keyed by this CPU), and loaded from the cache
(XDG_CACHE_HOME or ~/.cache, grpo-desktop/native/) in milliseconds afterwards. The packaged app
has no torch headers to compile with: it carries portable builds instead (x86-64-v4, v3, v2,
made by packaging/build.py in the folder BUNDLED, or the folder $GRPO_DESKTOP_BUNDLED_KERNELS
names) and loads the best one this CPU runs. Before use they are checked against torch's
operations on a small example. Where any of that fails (no compiler, another platform, a bundle
for another torch or no level this CPU runs, a wrong result) the decode runs torch's operations
as before, and `describe()` says why; a failed build is remembered in the cache and not tried
again until the compiler changes.
GRPO_DESKTOP_NATIVE=0 switches them off.

What changes with them: the attention's and the products' sums run in another order (a
product's each output one sum over its inputs in order, with fused multiply-adds: a row's bits
do not depend on the rows beside it) and the exponential is glibc's vectorised one, so logits
differ from torch's in the last bits (the tests hold them
within 1e-5) and a sampled token can differ where two candidates' probabilities tie to that
precision (SmolLM2's runs parted at their third step; the demo's did not); the keys and
values written are torch's bits (-ffp-contract=off). The same library carries the passes'
attention, forward and backward (`attend`, native_attention.cpp), which ops/fused_attention.py
puts in transformers' place on the CPU: the prefill, the log-prob and update passes then run it;
and their RMSNorm, rotary embedding and SwiGLU gate, forward and backward (native_layers.cpp,
for ops/fused_layers.py); and the sampler's draw for vocabularies of one block (native_draw.cpp,
for ops/draw.py's `draw`).

Try it: python -c "from grpo_desktop.engine.ops import native; native.decode_ops(); print(native.describe())"
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path

import torch

from grpo_desktop.engine.ops import native_build

ENV = "GRPO_DESKTOP_NATIVE"
BUNDLED_ENV = "GRPO_DESKTOP_BUNDLED_KERNELS"  # another folder of portable builds (tests, packagers)
BUNDLED = Path(__file__).with_name("bundled")  # where the packaged app carries them
SOURCE = native_build.SOURCE
FAILED = "failed.txt"  # in a build's cache folder: the compiler it failed with, and why
# This CPU's instructions; 512-bit vectors where it has them (GCC's tuning for recent Xeons
# prefers 256: the softmax, SiLU and norm loops ran 4-25 % slower so, bench/kernel_levels.py)
TARGET = ["-march=native", "-mprefer-vector-width=512"]
FLAGS = [*native_build.COMPILE_FLAGS, *TARGET]
COMPILING = "Compiling fused kernels for faster CPU sampling (once on this machine; about 6 s on two cores)…"
_lock = threading.Lock()
# decode_ops()'s answer: the ops, and either how they came (`done`) or why there are none (`why`)
_state: dict[str, object] = {"tried": False, "ops": None, "done": None, "why": "not built yet"}


def cache_root() -> Path:
    """Where built kernels are kept: $XDG_CACHE_HOME or ~/.cache, then grpo-desktop/native."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "grpo-desktop" / "native"


def _cpu_identity() -> str:
    """The CPU's model and feature flags: a -march=native build is only for CPUs like this one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def _library() -> tuple[Path, Path]:
    """(this build's cache folder, its library file in it)."""
    name = build_name()
    return cache_root() / name, cache_root() / name / f"{name}.so"


def build_name() -> str:
    """The cached build's name: a hash of its source, flags, torch and this CPU."""
    digest = hashlib.sha256()
    for part in (
        native_build.source_bytes(SOURCE),
        " ".join(FLAGS).encode(),
        json.dumps(native_build.SOURCE_FLAGS, sort_keys=True).encode(),
        torch.__version__.encode(),
    ):
        digest.update(part)
    digest.update(_cpu_identity().encode())
    return "grpo_desktop_native_" + digest.hexdigest()[:16]


def _bundle_folder() -> Path | None:
    """The folder of portable builds this app carries (or $GRPO_DESKTOP_BUNDLED_KERNELS names),
    or None where there is none (an installation from source compiles its own)."""
    folder = Path(os.environ.get(BUNDLED_ENV) or BUNDLED)
    return folder if (folder / native_build.MANIFEST).is_file() else None


def _switched_off() -> str | None:
    """Why no kernels are wanted or possible here at all, or None."""
    if os.environ.get(ENV, "1") == "0":
        return f"switched off ({ENV}=0)"
    if not sys.platform.startswith("linux"):
        return f"built only on Linux so far (this is {sys.platform})"
    return None


def _cannot_compile() -> str | None:
    """Why no build for this CPU is attempted here, or None."""
    if getattr(sys, "frozen", False):
        return "not compiled in the packaged app (it has no C++ headers for torch)"
    compiler = native_build.compiler()
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler}) on the PATH; install g++ to get them"
    return None


def _compiler_stamp() -> str:
    """The compiler's path and modification time: a build that failed with this compiler is not
    tried again until it changes (installed, upgraded or another CXX)."""
    path = shutil.which(native_build.compiler()) or ""
    try:
        return f"{path} {os.stat(path).st_mtime_ns}"
    except OSError:
        return path


def _failed_before(where: Path) -> str | None:
    """Why this build failed with this compiler before (its marker in the cache), or None."""
    try:
        stamp, reason = (where / FAILED).read_text(encoding="utf-8").split("\n", 1)
    except (OSError, ValueError):
        return None
    return reason.strip() if stamp == _compiler_stamp() else None


def _remember_failure(where: Path, problem: str) -> str:
    """Write why the kernels failed beside them (so later runs do not wait for the same
    failure: `_failed_before`); returns `problem`."""
    with contextlib.suppress(OSError):
        where.mkdir(parents=True, exist_ok=True)
        (where / FAILED).write_text(f"{_compiler_stamp()}\n{problem}", encoding="utf-8")
    return problem


def _self_check(ops) -> str | None:
    """Compare the kernels with torch's operations on a small example; None when they agree.
    Its head width (88) and length (90) take each of the attention's paths: blocks of 64 and 16
    and a last block overlapping the one before; the product's 40 rows and 29 outputs, each of
    `linear`'s (chunks of 32 and 16 rows, tiles of weight rows and single ones). Measured margin
    to the tolerances: 40x for the attention; the product at most a quarter of its tolerance
    over 200 random draws of its inputs."""
    g = torch.Generator().manual_seed(0)
    N, H, Hkv, D, L, cap = 3, 4, 2, 88, 90, 92
    qkv = torch.randn(N, H + 2 * Hkv, D, generator=g)
    cos, sin = torch.randn(N, 1, D, generator=g), torch.randn(N, 1, D, generator=g)
    keys, values = (
        torch.randn(N, Hkv, D, cap, generator=g),
        torch.randn(N, Hkv, cap, D, generator=g),
    )
    blocked = torch.zeros(N, 1, 1, L, dtype=torch.bool)
    blocked[0, ..., :2] = True
    scaling = D**-0.5
    out = ops.rope_attend(qkv, cos, sin, keys, values, L, H, Hkv, scaling, blocked)
    qk = qkv[:, : H + Hkv]
    rotated = qk * cos + qk.roll(D // 2, dims=-1) * sin  # (N, H + Hkv, D)
    if not torch.equal(keys[..., L - 1], rotated[:, H:]):
        return "its key writes differ from torch's"
    scores = rotated[:, :H].reshape(N, Hkv, -1, D) @ keys[..., :L] * scaling
    probs = scores.masked_fill(blocked, float("-inf")).softmax(-1)
    expected = (probs @ values[:, :, :L]).reshape(N, -1)
    if not torch.allclose(out, expected, rtol=1e-5, atol=2e-6):
        return "its attention differs from torch's"
    gu = torch.randn(N, 2 * D, generator=g)
    gated = torch.nn.functional.silu(gu[:, :D]) * gu[:, D:]
    if not torch.allclose(ops.silu_mul(gu, D), gated, rtol=1e-5, atol=1e-6):
        return "its SiLU differs from torch's"
    weight = torch.randn(2 * D, generator=g)
    normed = torch.rms_norm(gu, [2 * D], weight, 1e-6)
    if not torch.allclose(ops.rms_norm(gu, weight, 1e-6), normed, rtol=1e-5, atol=1e-6):
        return "its RMSNorm differs from torch's"
    # 40 rows: a chunk of 32 and one of 8; 29 outputs: tiles of weight rows and single ones
    x, w, bias = torch.randn(40, D, generator=g), torch.randn(29, D, generator=g), weight[:29]
    product = torch.nn.functional.linear(x.double(), w.double(), bias.double()).float()
    if not torch.allclose(ops.linear(x, w, bias), product, rtol=2e-5, atol=2e-5):
        return "its matrix product differs from torch's"
    problem = _attention_check(ops, g) if has_attend(ops) else None
    problem = problem or (_step_check(ops, g) if has_step(ops) else None)
    problem = problem or _draw_check(ops, g)  # every build has the draw (plain loops)
    return problem or _layers_check(ops, g)  # every build has them (plain vector loops)


def _draw_check(ops, g: torch.Generator) -> str | None:
    """`draw_block` against draw.py's one-block draw: the same tokens for the same numbers."""
    from grpo_desktop.engine.ops import draw

    probs = torch.softmax(torch.randn(9, 50, generator=g) * 4, dim=-1)  # (9, 50)
    probs[:, ::4] = 0.0  # masked tokens
    u = torch.rand(9, 1, dtype=torch.float64, generator=g)  # (9, 1)
    mass, _ = draw._blocks(probs)
    if not torch.equal(ops.draw_block(probs, u), draw._invert_one_block(probs, mass, u)):
        return "its token draw differs from draw.py's"
    return None


def _step_check(ops, g: torch.Generator) -> str | None:
    """`decode_step` against the same step op by op (decode_script.NATIVE_SOURCE's order): two
    layers (q/k/v with biases), 5 rows of which two read a third's prompt (`lead`; 20
    positions and heads 16 wide, so its blocks of 16 do), one row padded."""
    N, E, H, Hkv, D, F, V, P, cap = 5, 24, 4, 2, 16, 20, 11, 20, 22
    R = (H + 2 * Hkv) * D

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.5

    layers = [
        dict(n1=rand(E), n2=rand(E), qkv=rand(R, E), qkv_b=rand(R), o=rand(E, H * D), gu=rand(2 * F, E),
             down=rand(E, F), keys=rand(N, Hkv, D, cap), values=rand(N, Hkv, cap, D))
        for _ in range(2)
    ]  # fmt: skip
    for x in layers:  # rows 3 and 4 hold row 2's prompt
        x["keys"][3:, ..., :P] = x["keys"][2, ..., :P]
        x["values"][3:, :, :P] = x["values"][2, :, :P]
    norm, head = rand(E), rand(V, E)
    h, cos, sin = rand(N, E), rand(N, 1, D), rand(N, 1, D)
    blocked = torch.zeros(N, 1, 1, cap, dtype=torch.bool)
    blocked[0, ..., :2] = True
    L = P + 1
    expected, x_h = None, h.clone()
    copies = [(x["keys"].clone(), x["values"].clone()) for x in layers]
    for x, (k, v) in zip(layers, copies):
        qkv = ops.linear(ops.rms_norm(x_h, x["n1"], 1e-6), x["qkv"], x["qkv_b"]).view(N, -1, D)
        out = ops.rope_attend(qkv, cos, sin, k, v, L, H, Hkv, 0.3, blocked)
        x_h.add_(ops.linear(out, x["o"], None))
        gated = ops.silu_mul(ops.linear(ops.rms_norm(x_h, x["n2"], 1e-6), x["gu"], None), F)
        x_h.add_(ops.linear(gated, x["down"], None))
    expected = ops.linear(ops.rms_norm(x_h, norm, 1e-6), head, None)
    lists = {k: [x[k] for x in layers] for k in layers[0]}
    nones = [None, None]
    logits = ops.decode_step(
        h, cos, sin, blocked, L, lists["n1"], lists["n2"], [1e-6, 1e-6], lists["qkv"],
        lists["qkv_b"], lists["o"], nones, lists["gu"], nones, lists["down"], nones,
        lists["keys"], lists["values"], H, Hkv, D, F, 0.3, norm, 1e-6, head, None,
        torch.tensor([0, 1, 2, 2, 2]), P,
    )  # fmt: skip
    if not torch.allclose(logits, expected, rtol=1e-5, atol=1e-5):
        return "its whole decode step differs from its kernels op by op"
    if not all(torch.equal(x["keys"], k) for x, (k, _) in zip(layers, copies)):
        return "its whole decode step writes other keys than its kernels"
    return None


def _layers_check(ops, g: torch.Generator) -> str | None:
    """native_layers.cpp's six ops against torch's in float64: rows of 40 (a width of 3 vectors
    and a tail), rotary on a transposed (B, H, L, D) and cos shared by the batch."""
    x = torch.randn(5, 40, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(40, generator=g, dtype=torch.float64)
    dy = torch.randn(5, 40, generator=g, dtype=torch.float64)
    (w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))).backward(dy)
    y, rstd = ops.norm_forward(x.detach().float(), w.float(), 1e-6)
    dx = ops.norm_backward(dy.float(), x.detach().float(), w.float(), rstd)
    expected = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    if not (_close(y, expected) and _close(dx, x.grad)):
        return "its training norm differs from torch's"
    q = torch.randn(2, 3, 4, 40, generator=g, dtype=torch.float64).transpose(1, 2)  # (B, H, L, D)
    cos, sin = (torch.randn(1, 3, 40, generator=g, dtype=torch.float64) for _ in range(2))
    q.requires_grad_()
    half = torch.cat((-q[..., 20:], q[..., :20]), dim=-1)
    rotated = q * cos[:, None] + half * sin[:, None]
    dq = torch.randn(rotated.shape, generator=g, dtype=torch.float64)
    rotated.backward(dq)
    mine = ops.rope_forward(q.detach().float(), cos.float(), sin.float())
    back = ops.rope_backward(dq.float(), cos.float(), sin.float())
    if not (_close(mine, rotated) and _close(back, q.grad)):
        return "its rotary embedding differs from torch's"
    gate, up = (torch.randn(5, 40, generator=g, dtype=torch.float64).requires_grad_() for _ in "gu")
    gated = torch.nn.functional.silu(gate) * up
    gated.backward(dy)
    dg, du = ops.swiglu_backward(dy.float(), gate.detach().float(), up.detach().float())
    forward = ops.swiglu_forward(gate.detach().float(), up.detach().float())
    if not (_close(forward, gated) and _close(dg, gate.grad) and _close(du, up.grad)):
        return "its SwiGLU gate differs from torch's"
    return None


def _close(mine: torch.Tensor, expected: torch.Tensor) -> bool:
    return torch.allclose(mine.double(), expected.detach(), rtol=1e-5, atol=1e-5)


def has_attend(ops) -> bool:
    """Whether this build has the passes' attention (builds for CPUs with AVX2 and FMA do; the
    x86-64-v2 one leaves it to torch)."""
    return _has(ops, "attend")


def _has(ops, name: str) -> bool:
    try:
        getattr(ops, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def has_step(ops) -> bool:
    """Whether this build has `decode_step`, the lean decoder's whole step in one call (builds
    with AVX2 and FMA, whose products it runs, do)."""
    return _has(ops, "decode_step")


def _attention_check(ops, g: torch.Generator) -> str | None:
    """`attend` and its backward (native_attention.cpp) against torch's attention in float64:
    grouped heads, 6 queries (a block of 4 and a short one), a mask with a gap, a row that sees
    no key, head width 32 (two vectors)."""
    N, H, Hkv, Lq, Lk, D = 2, 4, 2, 6, 21, 32
    q, k, v = (torch.randn(N, h, n, D, generator=g) for h, n in ((H, Lq), (Hkv, Lk), (Hkv, Lk)))
    allowed = torch.ones(N, 1, Lq, Lk, dtype=torch.bool).tril(Lk - Lq)
    allowed[0, :, :, 3:5] = False
    allowed[1, :, 2] = False
    out, lse = ops.attend(q, k, v, allowed, 0.3, False)  # (N, Lq, H, D)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q64, k64, v64, attn_mask=allowed, scale=0.3, enable_gqa=True
    ).transpose(1, 2)  # (N, Lq, H, D)
    if not torch.allclose(out.double(), expected, rtol=1e-5, atol=2e-6):
        return "its training attention differs from torch's"
    dout = torch.randn(out.shape, generator=g)
    expected.backward(dout.double())
    grads = ops.attend_backward(dout, q, k, v, out, lse, allowed, 0.3, False)
    wanted = (q64.grad.transpose(1, 2), k64.grad, v64.grad)
    if not all(torch.allclose(a.double(), b, rtol=1e-4, atol=1e-5) for a, b in zip(grads, wanted)):
        return "its training attention's gradients differ from torch's"
    return None


def _load_checked(library: Path):
    """Load a built library and check it: (ops, None), or (None, what went wrong) where it did
    not load (nothing registered then) or (ops, what is wrong) where it loaded but is wrong."""
    try:
        torch.ops.load_library(str(library))
    except Exception as exc:  # a damaged file, a missing symbol, an older glibc
        last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        return None, f"unloadable ({last[:160]})"
    ops = torch.ops.grpo_desktop
    try:  # the check runs a backward: whatever grad mode the first caller (a sampler) is in
        with torch.inference_mode(False), torch.enable_grad():
            return ops, _self_check(ops)
    except Exception as exc:  # another library under the same name, with other signatures
        return ops, f"its check raised {type(exc).__name__}: {str(exc)[:160]}"


def _from_bundle(folder: Path):
    """The packaged app's portable builds: (ops, how) with the best level this CPU runs, or
    (None, why not)."""
    try:
        manifest = json.loads((folder / native_build.MANIFEST).read_text(encoding="utf-8"))
        built_for, levels = manifest["torch"], manifest["levels"]
        source = manifest["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"the app's kernel list ({folder / native_build.MANIFEST}) is unreadable"
    if built_for != torch.__version__:
        return None, f"the app's kernels were built for torch {built_for}, not {torch.__version__}"
    if source != native_build.source_digest():
        return None, "the app's kernels were built from another version of their source"
    level = native_build.best_level(list(levels), native_build.cpu_flags())
    if level is None:
        return None, "this CPU runs none of the app's builds (they need SSE4.2 at least)"
    ops, problem = _load_checked(folder / levels[level.name])
    if ops is None:
        return None, f"the app's {level.name} kernels are {problem}"
    if problem:
        return None, f"the app's {level.name} kernels failed their check here: {problem}"
    return ops, f"bundled with the app ({level.name})"


def _build():
    """Load the bundled kernels, or load or compile this CPU's: (ops, how they came) or (None,
    why not)."""
    reason = _switched_off()
    if reason:
        return None, reason
    bundle = _bundle_folder()
    if bundle is not None:  # the packaged app: its builds are the only ones there can be
        return _from_bundle(bundle)
    reason = _cannot_compile()
    if reason:
        return None, reason
    where, library = _library()
    t0 = time.perf_counter()
    if library.exists():  # built before: load the library itself, without the build tools
        ops, problem = _load_checked(library)
        if ops is not None and problem is None:
            return ops, f"loaded from the cache ({where})"
        if ops is not None:  # loaded (its ops registered) but wrong: a rebuild of the same
            return None, _remember_failure(where, f"{problem} on this machine")  # source won't do
        with contextlib.suppress(OSError):  # a damaged file: removed, so the build makes it again
            library.unlink()
    failed = _failed_before(where)
    if failed:
        return None, f"{failed} (earlier; delete {where} to try again)"
    try:
        native_build.compile_library(library, TARGET)
    except (native_build.BuildError, OSError) as exc:  # OSError: a full disk, an unwritable cache
        problem = f"the build failed ({exc})"
    else:
        ops, problem = _load_checked(library)
        if problem:
            problem = f"{problem} on this machine"
    if problem:
        return None, _remember_failure(where, problem)
    return ops, f"compiled in {time.perf_counter() - t0:.1f} s, cached ({where})"


def decode_ops():
    """torch.ops.grpo_desktop (rope_attend, silu_mul, rms_norm, linear; attend and
    attend_backward for the passes, ops/fused_attention.py) once loaded and checked, else None.
    The first call in a process builds or loads them (see the module's docstring); later calls
    return the same answer at once."""
    with _lock:
        if not _state["tried"]:
            ops, how = _build()
            _state.update(tried=True, ops=ops, done=how if ops else None, why=None if ops else how)
        return _state["ops"]


def describe() -> str:
    """One line for logs: whether the fused decode kernels are in use here, and why not."""
    if _state["ops"] is not None:
        return f"fused decode kernels {_state['done']}"
    return f"unavailable: {_state['why']}"


def will_compile(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `describe_for(device, dtype)` is about to compile the kernels (no build of this
    source for this CPU in the cache yet): the run log announces the wait first."""
    if device.type != "cpu" or dtype != torch.float32 or _state["tried"]:
        return False
    if _switched_off() or _bundle_folder() is not None or _cannot_compile():
        return False
    where, library = _library()
    return not library.exists() and _failed_before(where) is None


def describe_for(device: torch.device, dtype: torch.dtype) -> str | None:
    """The run log's line for a model on `device` with weights of `dtype`: built or loaded (and
    how long it took) or why not; None where the kernels do not apply (a GPU, non-float32
    weights: the lean decoder's attention then stays torch's)."""
    if device.type != "cpu" or dtype != torch.float32:
        return None
    if decode_ops() is None:
        return (
            f"Faster CPU sampling kernels unavailable: {_state['why']}; sampling runs torch's "
            "operations instead (about a fifth slower on small models)."
        )
    return f"Faster CPU sampling: fused kernels {_state['done']}."
