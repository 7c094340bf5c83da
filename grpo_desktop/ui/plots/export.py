"""Save one plot of the live plots as a PNG (twice the screen resolution) or an SVG (vector).

Renders the plot's rectangle of the shared pyqtgraph scene with QPainter: pyqtgraph's own SVG
exporter cannot parse the paths Qt 6.12 writes, and its PNG exporter would need a second code
path. The CSV export of the history lives in the session layer (`RunHistory.write_csv`).
Try it: right-click a plot, Save as PNG…; tests/ui/plots/test_plots_long.py.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QGraphicsItem, QGraphicsScene


def render_plot(
    scene: QGraphicsScene, item: QGraphicsItem, title: str, kind: str, path: str
) -> None:
    """Write `item`'s part of `scene` to `path` as "png" or "svg"."""
    source = item.sceneBoundingRect()
    if kind == "png":
        image = QImage(
            int(source.width() * 2), int(source.height() * 2), QImage.Format.Format_ARGB32
        )
        image.fill(QColor("white"))
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        scene.render(painter, QRectF(image.rect()), source)
        painter.end()
        if not image.save(path):
            raise OSError(f"Could not write {path}")
        return
    target = QRectF(0, 0, source.width(), source.height())
    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setTitle(title)
    generator.setSize(source.size().toSize())
    generator.setViewBox(target)
    painter = QPainter(generator)
    painter.fillRect(target, QColor("white"))
    scene.render(painter, target, source)
    painter.end()
