"""Alarm banners in the window's message area (ui/common/message_area.py, the most important
messages there): one per alert kind the run raised, saying what it means, what to try (the whole
text under "More…" and in the tooltip when the line is cut), and × "Dismiss for this run".

The engine raises each health alarm once per run (engine/health/monitors.py); the checker's
alerts may repeat, and then the kind's banner is updated in place instead of stacking.
Dismissing a banner silences its kind until a new run starts from step 0 (continuing the same
run keeps it silent). Opening a session shows the banners of its saved alerts again. Titles and
explanations come from engine/alarm_kinds.py (the explanation is the banner's tooltip; Help uses
the same text, and "What does this mean?" asks for the kind's Help entry through
`help_requested`). The log line and the status bar message are written elsewhere.

Reads the session model only: `alert_raised`, `run_started`, `session_replaced`, `history.alerts`.
Try it: tests/ui/run/test_alarms.py.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from grpo_desktop.engine.alarm_kinds import alarm
from grpo_desktop.ui.common.message_area import PRIORITY, ElidedLabel, MessageArea, plain
from grpo_desktop.ui.common.widgets import rich_tooltip

# background, border, text: warnings amber, critical alarms red (as the message bar)
_COLORS = {
    "warning": ("#fff4e5", "#b26a00", "#663c00"),
    "critical": ("#fdecea", "#b3261e", "#611a15"),
}


def _field(alert: Any, name: str, default: Any = "") -> Any:
    return alert.get(name, default) if isinstance(alert, dict) else getattr(alert, name, default)


DISMISS_TIP = "Dismiss for this run: hide this alarm until a new run starts"


class AlarmBanner(QFrame):
    """One alarm: its title and step, the message, what to try, and the Dismiss button."""

    dismissed = Signal(str)  # kind
    help_requested = Signal(str)  # the kind's Help anchor ("alarm-no_signal")

    def __init__(self, kind: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind = kind
        self.step = 0
        self.text = ElidedLabel()
        self.help_link = QLabel(f'<a href="#{self.help_anchor()}">What does this mean?</a>')
        self.help_link.setToolTip("Open this alarm's entry in Help: what it means, where to look")
        self.help_link.linkActivated.connect(lambda href: self.help_requested.emit(href[1:]))
        self.dismiss_button = QPushButton("Dismiss for this run")  # the message area's ×
        self.dismiss_button.setToolTip(DISMISS_TIP)
        self.dismiss_button.hide()
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 2, 6, 2)
        row.addWidget(self.text, 1)
        row.addWidget(self.help_link, 0, Qt.AlignmentFlag.AlignVCenter)
        self.dismiss_button.clicked.connect(lambda: self.dismissed.emit(self.kind))

    def help_anchor(self) -> str:
        """This kind's Help entry (F1 in the banner opens it too)."""
        return f"alarm-{self.kind}"

    def show_alert(self, alert: Any) -> None:
        info = alarm(self.kind)
        severity = _field(alert, "severity", info.severity)
        bg, border, fg = _COLORS.get(severity, _COLORS["warning"])
        self.setStyleSheet(
            f"AlarmBanner {{ background: {bg}; border: 1px solid {border}; border-left: 4px solid"
            f" {border}; border-radius: 4px; }} AlarmBanner QLabel {{ color: {fg}; }}"
        )
        self.step = int(_field(alert, "step", 0))
        message = html.escape(str(_field(alert, "message")), quote=False)
        advice = html.escape(str(_field(alert, "advice")), quote=False)
        lines = [f"<b>{html.escape(info.title)}</b> &nbsp;·&nbsp; step {self.step}", message]
        if advice:
            lines.append(f"<b>What to try:</b> {advice}")
        self.text.setText("<br>".join(lines))
        if info.explanation:
            self.setToolTip(rich_tooltip(info.explanation))

    def plain_text(self) -> str:
        """The banner's text without markup (for tests and screen readers)."""
        return plain(self.text.text())


class AlarmBanners(QObject):
    """The alarm banners, one per kind, each a message in `area` (newest first among them)."""

    help_requested = Signal(str)  # a banner's "What does this mean?": its kind's Help anchor

    def __init__(self, model, area: MessageArea, parent: QObject | None = None):
        super().__init__(parent)
        self.model = model
        self.area = area
        self.banners: dict[str, AlarmBanner] = {}  # in the order they came
        self.dismissed: set[str] = set()
        model.alert_raised.connect(self._on_model_alert_raised)
        model.run_started.connect(self._on_model_run_started)
        model.session_replaced.connect(self._on_model_session_replaced)
        self._on_model_session_replaced()

    def kinds(self) -> list[str]:
        """The kinds shown, newest first."""
        return list(reversed(self.banners))

    def banner(self, kind: str) -> AlarmBanner | None:
        return self.banners.get(kind)

    def dismiss(self, kind: str) -> None:
        """Hide `kind`'s banner and ignore that kind until a new run starts."""
        self.dismissed.add(kind)
        banner = self.banners.pop(kind, None)
        if banner is not None:
            self.area.remove(banner)
            banner.deleteLater()

    def _show(self, alert: Any) -> None:
        kind = str(_field(alert, "kind"))
        if not kind or kind in self.dismissed:
            return
        banner = self.banners.get(kind)
        if banner is None:
            banner = AlarmBanner(kind)
            banner.dismissed.connect(self.dismiss)
            banner.help_requested.connect(self.help_requested)
            banner.show_alert(alert)
            self.banners[kind] = banner
            self.area.add(banner, PRIORITY["alarm"], lambda k=kind: self.dismiss(k), DISMISS_TIP)
        else:
            banner.show_alert(alert)

    def _clear(self) -> None:
        for banner in self.banners.values():
            self.area.remove(banner)
            banner.deleteLater()
        self.banners.clear()

    def _on_model_alert_raised(self, event) -> None:
        self._show(event)

    def _on_model_run_started(self, event) -> None:
        if not event.resumed:  # a new run: its alarms and dismissals start afresh
            self.dismissed.clear()
            self._clear()

    def _on_model_session_replaced(self) -> None:
        self.dismissed.clear()
        self._clear()
        for alert in self.model.history.alerts:
            self._show(alert)
