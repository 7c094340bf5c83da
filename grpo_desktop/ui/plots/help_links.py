"""A "?" link at the start of each plot's title that opens the plot's Help entry, and which plot
the mouse is over (so F1 there opens that plot's entry).

The link is part of the title's rich text (`kit.set_title` puts it before the title at every
change of the title, such as the series key, and keeps `titleLabel.text` the title alone): its
text item gets LinksAccessibleByMouse, so a click on the "?" activates the link (and claims the
mouse, so it does not also open a step's rollouts). Anchors are help/topics.py's `plot-<name>`.
Try it: tests/ui/help/test_help.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, Signal

from grpo_desktop.ui.plots.kit import set_title

SCHEME = "help:"
# Before the title: a long title is clipped at both ends, and its start stays visible longest.
LINK = "<a href='{href}' style='text-decoration:none'><b>&nbsp;?&nbsp;</b></a>&nbsp;"


class PlotHelpLinks(QObject):
    """The help links of a PlotsView's plots; `help_requested(anchor)` when one is clicked."""

    help_requested = Signal(str)

    def __init__(self, plots: dict[str, pg.PlotItem], canvas, parent: QObject | None = None):
        super().__init__(parent)
        self.plots = plots  # anchor -> plot item
        self.hovered: str | None = None  # the plot under the mouse, None once it left the canvas
        for anchor, plot in plots.items():
            self._set_link(plot, LINK.format(href=SCHEME + anchor))
            label = plot.titleLabel
            # Selectable too: a text item that only has links ignores the press, so the scene
            # would never give it the release that activates a link.
            flags = Qt.TextInteractionFlag
            label.item.setTextInteractionFlags(
                flags.LinksAccessibleByMouse | flags.TextSelectableByMouse
            )
            label.item.setToolTip("What this plot shows and what healthy looks like (Help)")
            label.item.linkActivated.connect(self._on_title_link_activated)
        canvas.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        canvas.viewport().installEventFilter(self)

    @contextmanager
    def hidden(self) -> Iterator[None]:
        """The titles without their "?" for a while (saving a plot as PNG or SVG)."""
        links = {anchor: plot.titleLabel.help_link for anchor, plot in self.plots.items()}
        for plot in self.plots.values():
            self._set_link(plot, "")
        try:
            yield
        finally:
            for anchor, plot in self.plots.items():
                self._set_link(plot, links[anchor])

    @staticmethod
    def _set_link(plot: pg.PlotItem, link: str) -> None:
        plot.titleLabel.help_link = link
        set_title(plot, plot.titleLabel.text)  # the title again, with (or without) its link

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Leave:
            self.hovered = None
        return False

    def _on_title_link_activated(self, href: str) -> None:
        if href.startswith(SCHEME):
            self.help_requested.emit(href[len(SCHEME) :])

    def _on_scene_mouse_moved(self, pos) -> None:
        self.hovered = next(
            (a for a, p in self.plots.items() if p.sceneBoundingRect().contains(pos)), None
        )
