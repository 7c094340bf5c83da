"""One Help entry (`Topic`) and the link syntax of the entries' markup (see topics.py).

Apart from topics.py so the texts (guides, plot_help, alarm_help, glossary) can import it
without importing the index that imports them. Qt-free.
Try it: tests/ui/help/test_help_topics.py (every link resolves).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LINK = re.compile(r"\[\[([^\]|]+)(?:\|([^\]]+))?\]\]")  # [[anchor]] or [[anchor|words]]


@dataclass(frozen=True)
class Topic:
    anchor: str  # stable: Help is opened on it (open_help("plot-reward"), "#alarm-no_signal")
    title: str
    section: str  # one of topics.SECTIONS
    body: str  # the markup described in topics.py
    keywords: tuple[str, ...] = field(default=())  # other words a search should find it by

    def links(self) -> list[str]:
        """The targets of this entry's links ("advantage", "lab:answer")."""
        return [m.group(1).strip() for m in LINK.finditer(self.body)]
