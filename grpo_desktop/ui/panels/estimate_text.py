"""What the "Will it fit?" estimate says, as plain text: the memory parts' names and their
hobbyist explanations, number formats, the fits / tight / will-not-fit verdict, and the lines the
view shows for one estimate (`engine.estimate.fit.estimate_run`'s dict).

Qt-free and torch-free (plain dicts in, strings out; the step time's range from
engine/estimate/timing.py, settings in words from ui/common/words.py), so it is tested on its own; the view
(`estimate_view.py`) puts the strings in labels, `estimate_bar.py` draws the bar.
Try it: tests/ui/panels/test_estimate.py.
"""

from __future__ import annotations

import html
import os
from typing import Any

from grpo_desktop.engine.estimate.timing import seconds_range
from grpo_desktop.ui.common.words import label_of, value_text

# (key in the estimate's "memory", label, what it is in hobbyist words): the legend's parts
PARTS = (
    (
        "weights",
        "Weights",
        "The model's own numbers, loaded once. Their size is parameters × bytes per weight: "
        "4 bytes in float32, 2 in bfloat16 or float16, about half a byte in 4-bit.",
    ),
    (
        "adapters_optimizer",
        "Training state",
        "What training adds for every weight it changes: the gradient and AdamW's two running "
        "averages (12-16 bytes per trainable weight). With LoRA only the small adapters train, "
        "so this stays small; full fine-tuning pays it for every weight.",
    ),
    (
        "activations",
        "Activations",
        "The in-between results of the forward pass that the backward pass needs, for every "
        "token of every answer in one pass, in every layer. They grow with G × completion "
        "length (the answers a pass takes times their tokens). Gradient checkpointing keeps "
        "only each layer's input and recomputes the rest: far less memory, about 30 % slower.",
    ),
    (
        "logits",
        "Logits",
        "The model's score for every word of its vocabulary at each token (150,000 words for "
        "Qwen). The app computes them a chunk of tokens at a time, so this is one chunk, not "
        "the whole batch.",
    ),
    (
        "kv_cache",
        "KV cache",
        "While it writes answers, the model keeps the keys and values of every token it has "
        "already read, in every layer, so each new token does not reread the whole text. It "
        "grows with B × G answers × (prompt + completion) tokens, and is freed before the "
        "training passes start.",
    ),
    (
        "overhead",
        "Other",
        "The program itself and its framework: Python, PyTorch and the app on the CPU, the "
        "cuBLAS workspace on a GPU, and the allocator's slack.",
    ),
)
# Drawn in the bar but not listed in the legend.
EXTRA_HELP = {
    "sampling_other": (
        "Sampling buffers",
        "While sampling, beside the KV cache: the scores of the tokens being sampled, the "
        "prompt's first pass and, with LoRA on the CPU, the adapters merged into the weights.",
    ),
    "outside_total": (
        "CUDA context",
        "Memory CUDA itself and PyTorch's cache hold on the GPU beyond what the tensors use.",
    ),
}
PART_LABELS = {key: label for key, label, _ in PARTS} | {k: v[0] for k, v in EXTRA_HELP.items()}
PART_HELP = {key: text for key, _, text in PARTS} | {k: v[1] for k, v in EXTRA_HELP.items()}
BAR_ORDER = ("weights", "adapters_optimizer", "overhead", "outside_total", "activations",
             "logits", "kv_cache", "sampling_other")  # fmt: skip

STATUS_HEX = {"fits": "#2e7d32", "tight": "#b26a00", "no": "#b3261e", "unknown": "#5f6b7a"}
TIGHT_SHARE = 0.10  # less free memory than this share left is "tight" (as the engine advises)


def format_bytes(n: float) -> str:
    """'3.2 GB', '412 MB', '1.5 MB', '96 KB' (powers of 10, as the engine's advice says them)."""
    n = max(float(n), 0.0)
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    if n >= 1e7:
        return f"{n / 1e6:.0f} MB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} KB"


def format_count(n: int) -> str:
    """1,543,714,304 -> '1.54 B'; 494,032,768 -> '494 M'; 1,632,000 -> '1.6 M'; 51,000 -> '51 K'."""
    if n >= 10**9:
        return f"{n / 10**9:.2f} B"
    if n >= 10**6:
        return f"{n / 10**6:.0f} M" if n >= 10**8 else f"{n / 10**6:.1f} M"
    if n >= 10**3:
        return f"{n / 10**3:.0f} K"
    return str(n)


def fit_status(fits: bool | None, headroom: int | None, free: int | None) -> str:
    """'fits', 'tight' (less than TIGHT_SHARE of the free memory left), 'no' or 'unknown'."""
    if fits is None or not free:
        return "unknown"
    if not fits:
        return "no"
    return "tight" if headroom is not None and headroom < TIGHT_SHARE * free else "fits"


PHASE_PARTS = {"training": ("activations", "logits"), "sampling": ("kv_cache", "sampling_other")}
VERDICTS = {"fits": "fits", "tight": "tight", "no": "will not fit", "unknown": "free unknown"}
TIME_HELP = (
    "A rough guess (within a factor of about two) from the model's size and this computer's "
    "speed: sampling the answers, then the training passes. It counts every answer at the full "
    "length and in every training pass; real steps are often faster, since answers end sooner "
    "and, without a KL penalty, groups whose answers all scored the same skip the update. The "
    "first steps of a run show the real figure."
)
MAX_ADVICE = 3  # the engine orders its advice best first


def seconds_text(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.0f} min"
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def short_name(name: str) -> str:
    """A hub id as it is ('Qwen/Qwen2.5-0.5B-Instruct'), a folder by its last part."""
    name = str(name).rstrip("/")
    if os.path.isabs(os.path.expanduser(name)) or name.startswith("."):
        return os.path.basename(name) or name
    return name


# Errors whose message alone does not say what went wrong ("'vocab_size'" for a KeyError).
BARE_ERRORS = (KeyError, AttributeError, TypeError, IndexError, ZeroDivisionError)


def one_line(error: Exception) -> str:
    """The error's first line; for a bare programming error, its kind too."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    if not first:
        return f"the estimate failed ({type(error).__name__})"
    if isinstance(error, BARE_ERRORS):
        return f"the estimate failed ({type(error).__name__}: {first})"
    return first


def summary(r: dict) -> tuple[str, str]:
    """(rich text, tooltip) of the model line: name, parameters, how many train."""
    m = r.get("model", {})
    params, trainable = int(m.get("params") or 0), int(m.get("trainable") or 0)
    if trainable >= params:
        share = "all trainable"
    else:
        share = f"{format_count(trainable)} trainable ({100 * trainable / max(params, 1):.2g} %)"
    name = html.escape(short_name(m.get("name", "")))
    text = f"<b>{name}</b>: {format_count(params)} parameters, {share}"
    tip = (
        f"{m.get('layers', '?')} layers, hidden size {m.get('hidden', '?')}, a vocabulary of "
        f"{int(m.get('vocab') or 0):,}: read from the model's config.json (nothing downloaded "
        "or loaded)."
    )
    return text, tip


def status_of(r: dict) -> str:
    return fit_status(r.get("fits"), r.get("headroom_bytes"), r.get("device", {}).get("free_bytes"))


def verdict(r: dict) -> tuple[str, list[str]]:
    """(rich text, tooltip lines): what the run needs against what is free, and the verdict."""
    dev, mem = r.get("device", {}), r.get("memory", {})
    status = status_of(r)
    needed = int(mem.get("needed") or mem.get("total") or 0)
    free = dev.get("free_bytes")
    where = "GPU memory" if dev.get("kind") == "cuda" else "RAM"
    line = f"Needs ≈ {format_bytes(needed)}"
    if free:
        line += f" of {format_bytes(free)} free {where}"
    text = f"{line}: <b style='color:{STATUS_HEX[status]}'>{VERDICTS[status]}</b>"
    total = dev.get("total_bytes")
    first = f"On {dev.get('name') or dev.get('kind', 'this computer')}"
    first += f", {format_bytes(total)} in all" if total else ""
    return text, [first + ". An estimate, not a guarantee.", *map(str, r.get("notes") or [])]


def peak_parts(r: dict) -> list[tuple[str, int]]:
    """The parts alive at the peak, in BAR_ORDER (the other phase's are freed before it)."""
    mem = r.get("memory", {})
    other = "sampling" if mem.get("peak_phase", "training") == "training" else "training"
    return [(k, int(mem.get(k) or 0)) for k in BAR_ORDER if k not in PHASE_PARTS[other]]


def legend(r: dict) -> list[tuple[str, str, bool, list[str]]]:
    """(key, 'Weights 6.4 MB', at the peak, tooltip lines after the part's help) per part."""
    mem = r.get("memory", {})
    phase = mem.get("peak_phase", "training")
    at_peak = {k for k, _ in peak_parts(r)}
    out = []
    for key, label, _help in PARTS:
        extra: list[str] = []
        if key == "weights":
            detail = mem.get("weights_detail") or {}
            extra = [f"{k}: {format_bytes(v)}" for k, v in detail.items()]
        elif key == "activations" and r.get("rows_per_pass"):
            rows = int(r["rows_per_pass"])
            extra = [f"One training pass takes {rows} answer{'s' if rows != 1 else ''} (the "
                     "micro-batch)."]  # fmt: skip
        elif key == "kv_cache" and mem.get("sampling_other"):
            extra = [f"Other sampling buffers: {format_bytes(mem['sampling_other'])}."]
        if key not in at_peak:
            extra.append(f"Not part of the peak, which comes while {phase}.")
        text = f"{label} {format_bytes(int(mem.get(key) or 0))}"
        out.append((key, text, key in at_peak, extra))
    return out


def load_words(load: tuple[float, int] | None) -> str:
    """'busy (load 1.9 on 2 cores)', 'idle', ... for a (load average, cores) pair."""
    if load is None:
        return "of unknown load"
    share = load[0] / load[1]
    how = "idle" if share < 0.25 else "partly busy" if share < 0.75 else "busy"
    return f"{how} (load {load[0]:.1f} on {load[1]} cores)"


def time_line(
    r: dict, now: tuple[float, int] | None = None, beside_run: bool = False
) -> tuple[str, list[str]]:
    """('≈ 3.4–6.6 s per step (rough; …)', tooltip lines by phase). On the CPU, a range from
    an idle computer to the load `now` (engine/estimate/timing.py), since the speed was measured
    at one moment under `device.speed_load`; a GPU's time is one figure. `beside_run`: `now` is
    the other programs' load while this app trains, and the words say so."""
    value = r.get("seconds_per_step")
    detail = r.get("seconds_detail") or {}
    lines = [f"{k}: {seconds_text(v)}" for k, v in detail.items() if isinstance(v, (int, float))]
    if not value:
        return "Time per step: no estimate", lines
    device = r.get("device") or {}
    if device.get("kind") != "cpu":
        return f"≈ {seconds_text(value)} per step (rough)", lines
    measured = device.get("speed_load")
    measured = tuple(measured) if measured else None
    low, high = seconds_range(value, measured, now)
    lines.append(
        f"This computer's speed was measured while it was {load_words(measured)}; it is "
        f"{load_words(now)} now. Other programs slow the run: the range goes from an idle "
        "computer to the load now."
    )
    where = "besides this run, the computer is" if beside_run else "this computer is"
    if seconds_text(low) == seconds_text(high):
        return f"≈ {seconds_text(low)} per step (rough; {where} {load_words(now)})", lines
    low_text, high_text = seconds_text(low), seconds_text(high)
    if low_text.split()[-1] == high_text.split()[-1]:  # 3.4–6.6 s, not 3.4 s–6.6 s
        low_text = low_text.split()[0]
    where = "besides this run, it is" if beside_run else "it is"
    return (
        f"≈ {low_text}–{high_text} per step (rough): the low end on an idle "
        f"computer; {where} {load_words(now)} now",
        lines,
    )


def advice(r: dict) -> list[dict[str, Any]]:
    """The advice to show ({"text", "change"?}, best first, at most MAX_ADVICE): only when the
    run will not fit or only just; none that asks for 4-bit on the CPU (the Model panel offers
    4-bit only with a CUDA GPU)."""
    if status_of(r) not in ("no", "tight"):
        return []
    items = r.get("advice_detail") or [{"text": a} for a in r.get("advice") or []]
    if r.get("device", {}).get("kind") == "cpu":
        items = [a for a in items if not _sets_4bit(a)]
    return items[:MAX_ADVICE]


def starter(r: dict) -> list[dict[str, Any]]:
    """The small-model starter's recommendation ({"text", "change"}; engine/config/starters.py)
    when the estimate has one: a pretrained model under ~1.5B parameters whose settings differ
    from it. Shown whether or not the run fits: it is about learning, not memory."""
    item = r.get("starter")
    return [item] if isinstance(item, dict) and item.get("text") else []


def describe_change(change: dict) -> str:
    """'Use LoRA: on, Quantization: 4-bit' (the fields' labels and the form's words)."""
    return ", ".join(
        f"{label_of(s, n)}: {value_text(s, n, v)}"
        for s, fields in change.items()
        for n, v in fields.items()
    )


def _sets_4bit(item: dict) -> bool:
    change = item.get("change")
    return isinstance(change, dict) and change.get("quantization", {}).get("mode") == "4bit"
