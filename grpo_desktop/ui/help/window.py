"""The Help window: a topic list with a search box on the left, the entry on the right.

A non-modal top-level window, made by the main window on first use (F1, Help ▸ GRPO Desktop Help)
and kept; closing only hides it. `show_topic(anchor)` shows, raises and selects an entry. Links
inside an entry move to another entry (Back returns); a "lab:" link (try it in the Lab) emits
`lab_requested` with the Lab tab's title, which the main window opens. The content is
help/topics.py (Qt-free); this module only lists, searches and displays it.

`context_anchor(widget)` is what context-sensitive F1 asks: the nearest widget (the one under the
mouse, or the focused one, or a parent) with a `help_anchor()` method — a plot, an alarm banner.
Try it: F1 in the main window; tests/ui/help/test_help.py.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from grpo_desktop.ui.help.topics import HOME, LAB_TABS, TOPICS, by_section, render, search

DEFAULT_SIZE = (940, 680)
KINDS = {"Start here": "guide", "Training plots": "plot", "Alarms": "alarm", "Glossary": "term"}
ANCHOR_ROLE = Qt.ItemDataRole.UserRole


class HelpWindow(QWidget):
    """GRPO Desktop Help. `lab_requested(tab_title)` asks the owner to open a Lab tab."""

    lab_requested = Signal(str)
    topic_shown = Signal(str)  # anchor

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("help_window")
        self.setWindowTitle("GRPO Desktop Help")
        self.current = ""
        self._back: list[str] = []
        self.search_box = QLineEdit()
        self.search_box.setPlaceholderText("Search help (for example: advantage)")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.setToolTip("Type a word: the list keeps the entries that contain it")
        self.tree = QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setColumnCount(2)  # the title; in search results also its kind, greyed
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setMinimumWidth(220)
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)  # links are handled here: entries, the Lab
        self.browser.document().setDocumentMargin(12)
        self.back_button = QPushButton("Back")
        self.back_button.setToolTip("The entry you were reading before (Alt+Left)")
        self.back_button.setShortcut("Alt+Left")
        self.back_button.setEnabled(False)

        left = QWidget()
        col = QVBoxLayout(left)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.search_box)
        col.addWidget(self.tree, 1)
        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.back_button)
        top.addStretch(1)
        rcol.addLayout(top)
        rcol.addWidget(self.browser, 1)
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, DEFAULT_SIZE[0] - 260])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)
        self._fill_tree(None)
        self._fit_size()

        self.search_box.textChanged.connect(self._on_search_box_text_changed)
        self.search_box.returnPressed.connect(self._on_search_box_return_pressed)
        self.tree.currentItemChanged.connect(self._on_tree_current_item_changed)
        self.browser.anchorClicked.connect(self._on_browser_anchor_clicked)
        self.back_button.clicked.connect(self._on_back_button_clicked)
        self.open_topic(HOME, remember=False)

    def _fit_size(self) -> None:
        width, height = DEFAULT_SIZE
        screen = self.screen() or (self.parent().screen() if self.parent() else None)
        if screen is not None:
            area = screen.availableGeometry()
            width, height = min(width, area.width() - 40), min(height, area.height() - 60)
        self.resize(width, height)

    # ------------------------------------------------------------------ showing

    def show_topic(self, anchor: str | None = None) -> HelpWindow:
        """Show the window, raised, on the entry `anchor` (the current one when None)."""
        if anchor:
            self.open_topic(anchor)
        self.show()
        self.raise_()
        self.activateWindow()
        return self

    def open_topic(self, anchor: str, remember: bool = True) -> None:
        """Display the entry `anchor` (an unknown one says so) and select it in the list."""
        anchor = anchor.lstrip("#")
        if remember and self.current and anchor != self.current:
            self._back.append(self.current)
        self.back_button.setEnabled(bool(self._back))
        self.current = anchor
        self.browser.setHtml(render(anchor))
        self._select(anchor)
        self.topic_shown.emit(anchor)

    def listed_anchors(self) -> list[str]:
        """The entries the list shows now (all, or the search's hits), top to bottom."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            section = self.tree.topLevelItem(i)
            out += [section.child(j).data(0, ANCHOR_ROLE) for j in range(section.childCount())]
        return out

    # ------------------------------------------------------------------ the list

    def _fill_tree(self, hits: list[str] | None) -> None:
        """Every entry under its section, or a search's hits best first under one heading."""
        self.tree.blockSignals(True)
        self.tree.clear()
        if hits is None:
            groups = [(s, [t.anchor for t in topics]) for s, topics in by_section()]
        else:
            n = len(hits)
            groups = [
                (f"{n} {'entry' if n == 1 else 'entries'} found" if n else "Nothing found", hits)
            ]
        for heading, anchors in groups:
            head = QTreeWidgetItem([heading])
            head.setFlags(Qt.ItemFlag.ItemIsEnabled)
            font = head.font(0)
            font.setBold(True)
            head.setFont(0, font)
            self.tree.addTopLevelItem(head)
            for anchor in anchors:
                section = TOPICS[anchor].section
                item = QTreeWidgetItem([TOPICS[anchor].title, KINDS[section] if hits else ""])
                item.setData(0, ANCHOR_ROLE, anchor)
                item.setToolTip(0, section)
                item.setForeground(1, QBrush(QColor("#777777")))
                head.addChild(item)
            head.setExpanded(True)
        self.tree.blockSignals(False)
        self._select(self.current)

    def _select(self, anchor: str) -> None:
        self.tree.blockSignals(True)
        self.tree.setCurrentItem(None)
        for i in range(self.tree.topLevelItemCount()):
            section = self.tree.topLevelItem(i)
            for j in range(section.childCount()):
                if section.child(j).data(0, ANCHOR_ROLE) == anchor:
                    self.tree.setCurrentItem(section.child(j))
                    self.tree.scrollToItem(section.child(j))
        self.tree.blockSignals(False)

    def _on_search_box_text_changed(self, text: str) -> None:
        self._fill_tree([t.anchor for t in search(text)] if text.strip() else None)

    def _on_search_box_return_pressed(self) -> None:
        listed = self.listed_anchors()
        if listed:
            self.open_topic(listed[0])

    def _on_tree_current_item_changed(self, item, _previous) -> None:
        anchor = item.data(0, ANCHOR_ROLE) if item is not None else None
        if anchor:
            self.open_topic(anchor)

    # ------------------------------------------------------------------ links

    def _on_browser_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == "lab":
            self.lab_requested.emit(LAB_TABS.get(url.path(), ""))
        elif url.fragment() in TOPICS or not url.scheme():
            self.open_topic(url.fragment() or url.path())

    def _on_back_button_clicked(self) -> None:
        if self._back:
            anchor = self._back.pop()
            self.open_topic(anchor, remember=False)
            self.back_button.setEnabled(bool(self._back))


def context_anchor(*widgets: QWidget | None) -> str | None:
    """The Help entry of the first of `widgets` (or a parent of it) that has `help_anchor()`
    returning one: what F1 opens when it is pressed over a plot or in an alarm banner."""
    for widget in widgets:
        while widget is not None:
            get = getattr(widget, "help_anchor", None)
            anchor = get() if callable(get) else None
            if anchor:
                return anchor
            widget = widget.parentWidget()
    return None
