"""A "?" link at the start of each plot's title that opens the plot's Help entry, and which plot
the mouse is over (so F1 there opens that plot's entry).

The link is part of the title's rich text (`kit.set_title` puts it before the title at every
change of the title, such as the series key, and keeps `titleLabel.text` the title alone): its
text item gets
LinksAccessibleByMouse, so a click on the "?" activates the link (and claims the mouse, so it
does not also open a step's rollouts). Anchors are help/topics.py's `plot-<name>`.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal

from grpo_desktop.ui.plots.kit import set_title

SCHEME = "help:"
LINK = "<a href='{href}' style='text-decoration:none'><b>&nbsp;?&nbsp;</b></a>&nbsp;"  # before the title: a long title is clipped at both ends, its start stays visible longest


class PlotHelpLinks(QObject):
    """The help links of a PlotsView's plots; `help_requested(anchor)` when one is clicked."""

    help_requested = Signal(str)

    def __init__(self, plots: dict[str, pg.PlotItem], scene, parent: QObject | None = None):
        super().__init__(parent)
        self.plots = plots  # anchor -> plot item
        self.hovered: str | None = None
        for anchor, plot in plots.items():
            label = plot.titleLabel
            label.help_link = LINK.format(href=SCHEME + anchor)
            set_title(plot, label.text)  # the title again, now with its link
            # Selectable too: a text item that only has links ignores the press, so the scene
            # would never give it the release that activates a link.
            flags = Qt.TextInteractionFlag
            label.item.setTextInteractionFlags(
                flags.LinksAccessibleByMouse | flags.TextSelectableByMouse
            )
            label.item.setToolTip("What this plot shows and what healthy looks like (Help)")
            label.item.linkActivated.connect(self._on_title_link_activated)
        scene.sigMouseMoved.connect(self._on_scene_mouse_moved)

    def _on_title_link_activated(self, href: str) -> None:
        if href.startswith(SCHEME):
            self.help_requested.emit(href[len(SCHEME) :])

    def _on_scene_mouse_moved(self, pos) -> None:
        self.hovered = next(
            (a for a, p in self.plots.items() if p.sceneBoundingRect().contains(pos)), None
        )
