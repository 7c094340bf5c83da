"""The pieces of the "Will it fit?" estimate that only draw: the memory parts' names and hobbyist
explanations, number formatting, and `MemoryBar`, a stacked bar of the parts against the free
memory whose colour says fits (green), tight (amber) or will not fit (red).

No knowledge of the session or the engine here: `estimate_view.py` feeds it plain numbers.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

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

STATUS_COLOURS = {
    "fits": QColor("#2e7d32"),
    "tight": QColor("#b26a00"),
    "no": QColor("#b3261e"),
    "unknown": QColor("#5f6b7a"),
}
FREE_COLOUR = QColor("#e4e7eb")
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


SHADES = (100, 180, 135, 205, 225, 115, 195, 105)  # by BAR_ORDER: neighbours far apart


def part_colour(status: str, key: str) -> QColor:
    """The part's shade of the status colour."""
    index = BAR_ORDER.index(key) if key in BAR_ORDER else 0
    return STATUS_COLOURS[status].lighter(SHADES[index])


class MemoryBar(QWidget):
    """The parts side by side, scaled to max(peak, free memory); the free memory is the grey
    track and a dark tick, so a peak past the tick is what will not fit. Each part's tooltip
    names it, its size and what it is."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.parts: list[tuple[str, int]] = []
        self.free: int | None = None
        self.status = "unknown"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(120)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(300, 16)

    def set_parts(self, parts: list[tuple[str, int]], free: int | None, status: str) -> None:
        self.parts = [(k, int(v)) for k, v in parts if v > 0]  # in BAR_ORDER
        self.free, self.status = free, status
        self.update()

    def _scale(self) -> float:
        total = sum(v for _, v in self.parts)
        return float(max(total, self.free or 0, 1))

    def segments(self) -> list[tuple[str, QRectF]]:
        """Each part's rectangle in widget coordinates."""
        width, height, scale = self.width() - 2, self.height() - 2, self._scale()
        x, out = 1.0, []
        for key, value in self.parts:
            w = width * value / scale
            out.append((key, QRectF(x, 1, w, height)))
            x += w
        return out

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt API)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        track = QRectF(1, 1, self.width() - 2, self.height() - 2)
        p.fillRect(track, FREE_COLOUR)
        for key, rect in self.segments():
            p.fillRect(rect, part_colour(self.status, key))
            p.setPen(QPen(QColor("white"), 1))
            p.drawLine(rect.topRight(), rect.bottomRight())
        if self.free:
            x = 1 + (self.width() - 2) * self.free / self._scale()
            p.setPen(QPen(QColor("#202124"), 2))
            p.drawLine(int(x), 0, int(x), self.height())
        p.setPen(QPen(QColor("#9aa0a6"), 1))
        p.drawRect(track.adjusted(0, 0, -1, -1))
        p.end()

    def part_at(self, x: float) -> str | None:
        return next((k for k, r in self.segments() if r.left() <= x < r.right()), None)

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            key = self.part_at(event.pos().x())
            if key is None:
                text = "Free memory: the dark tick is all that is free now." if self.free else ""
            else:
                value = dict(self.parts)[key]
                text = f"<b>{PART_LABELS.get(key, key)}: {format_bytes(value)}</b><br>"
                text += PART_HELP.get(key, "")
            if text:
                QToolTip.showText(event.globalPos(), f"<qt>{text}</qt>", self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


__all__ = ["BAR_ORDER", "PARTS", "MemoryBar", "fit_status", "format_bytes", "format_count"]
