"""The Help page's content as data: every entry (guide, plot, alarm, glossary term) with a stable
anchor, a title, its section and its text, plus search and the HTML a browser shows.

Entries are written in a tiny markup so they stay readable here: paragraphs separated by a blank
line, "- " starts a bullet, **bold**, *italic* (a setting's label), `code`, [[anchor]] or
[[anchor|words]] links to another entry, [[lab:answer|words]] (or lab:signal, lab:reward) opens a
tab of the GRPO Lab. The texts live in guides.py, plot_help.py, alarm_help.py and glossary.py; an
alarm's explanation is read from engine/alarm_kinds.py, not repeated. Qt-free: tests check every
link and that every plot and alarm kind has an entry; the window (help/window.py) only displays
what `render` returns.

Try it:  python -m grpo_desktop.ui.help.topics advantage
"""

from __future__ import annotations

import html
import re
import sys

from grpo_desktop.engine.alarm_kinds import ALARMS
from grpo_desktop.ui.help.entry import LINK as _LINK
from grpo_desktop.ui.help.entry import Topic

SECTIONS = ("Start here", "Training plots", "Alarms", "Glossary")
HOME = "how-grpo-learns"
LAB_TABS = {  # lab: link target -> the Lab tab's title (ui/lab/window.py)
    "answer": "One step by hand (17 × 24)",
    "signal": "Which groups teach",
    "reward": "Design the reward (17 × 23)",
}


def _all() -> list[Topic]:
    from grpo_desktop.ui.help.alarm_help import alarm_topics
    from grpo_desktop.ui.help.glossary import GLOSSARY
    from grpo_desktop.ui.help.guides import GUIDES
    from grpo_desktop.ui.help.plot_help import PLOT_TOPICS

    return [
        *GUIDES,
        *PLOT_TOPICS,
        *alarm_topics(),
        *sorted(GLOSSARY, key=lambda t: t.title.lower()),
    ]


TOPICS: dict[str, Topic] = {t.anchor: t for t in _all()}


def topic(anchor: str) -> Topic | None:
    """The entry for `anchor` (a leading '#' is ignored); None when there is none."""
    return TOPICS.get(anchor.lstrip("#"))


def plot_anchor(name: str) -> str:
    """The entry of the training plot called `name` in PlotsView ("reward", "hist", …)."""
    return f"plot-{name}"


def alarm_anchor(kind: str) -> str:
    """The entry of an alert kind (engine/alarm_kinds.py), as named in alarm_kinds' docstring."""
    return f"alarm-{kind}"


def by_section() -> list[tuple[str, list[Topic]]]:
    """The entries in reading order, grouped under SECTIONS."""
    return [(s, [t for t in TOPICS.values() if t.section == s]) for s in SECTIONS]


def plain_text(t: Topic) -> str:
    """The entry's words without markup (what a search looks in)."""
    text = _LINK.sub(lambda m: m.group(2) or _title_of(m.group(1)), t.body)
    return text.replace("*", "").replace("`", "")


def search(query: str) -> list[Topic]:
    """Entries containing every word of `query`, best first: title hits, then keywords, then
    the text. An empty query gives every entry."""
    words = [w for w in re.split(r"\s+", query.lower().strip()) if w]
    if not words:
        return list(TOPICS.values())
    scored = []
    for i, t in enumerate(TOPICS.values()):
        title, keys, text = t.title.lower(), " ".join(t.keywords).lower(), plain_text(t).lower()
        if not all(w in title or w in keys or w in text for w in words):
            continue
        score = sum(3 * (w in title) + 2 * (w in keys) + (w in text) for w in words)
        scored.append((-score, i, t))
    return [t for _, _, t in sorted(scored)]


def _title_of(target: str) -> str:
    target = target.strip()
    if target.startswith("lab:"):
        return "the GRPO Lab"
    found = topic(target)
    if found is None:
        return target
    words = found.title.split(" (")[0]  # "No signal (groups that teach nothing)" -> "No signal"
    first = words.split(" ")[0]
    if found.section == "Glossary" and first[1:].islower() and not first.endswith("."):
        words = words[0].lower() + words[1:]  # inside a sentence; KL, LoRA, Dr. GRPO stay
    return words


def _inline(text: str) -> str:
    """Escape, then **bold**, `code` and [[links]]."""
    out = html.escape(text, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\*(.+?)\*", r"<i>\1</i>", out)
    out = re.sub(r"`(.+?)`", r"<code>\1</code>", out)

    def link(m: re.Match) -> str:
        target = m.group(1).strip()
        words = m.group(2) or _title_of(target)
        href = target if target.startswith("lab:") else f"#{target}"
        return f'<a href="{href}">{words}</a>'

    return _LINK.sub(link, out)


def body_html(t: Topic) -> str:
    """The entry's body as HTML: <p> paragraphs and <ul> lists."""
    parts: list[str] = []
    for block in re.split(r"\n\s*\n", t.body.strip()):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if lines and lines[0].startswith("- "):
            items, current = [], []
            for ln in lines:
                if ln.startswith("- ") and current:
                    items.append(" ".join(current))
                    current = []
                current.append(ln[2:] if ln.startswith("- ") else ln)
            items.append(" ".join(current))
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        else:
            parts.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(parts)


STYLE = (
    "body { font-size: 10.5pt; } h1 { font-size: 15pt; margin-bottom: 2px; } "
    ".section { color: #666666; font-size: 9pt; } li { margin-bottom: 4px; } "
    "code { background: #f1f1f1; } .box { background: #eef4fb; }"
)


def render(anchor: str) -> str:
    """The whole page for `anchor`, with its title and section; a page saying so when unknown."""
    t = topic(anchor)
    if t is None:
        name = html.escape(anchor)
        return (
            f"<html><head><style>{STYLE}</style></head><body><h1>No entry “{name}”</h1>"
            f'<p>Help has no entry named “{name}”. Search above, or start at <a href="#{HOME}">'
            "How GRPO learns</a>.</p></body></html>"
        )
    return (
        f"<html><head><style>{STYLE}</style></head><body>"
        f'<div class="section">{html.escape(t.section)}</div>'
        f"<h1>{html.escape(t.title)}</h1>\n{body_html(t)}</body></html>"
    )


def missing_alarm_entries() -> list[str]:
    """Alert kinds in engine/alarm_kinds.py without their Help text (what to do, where to look)."""
    from grpo_desktop.ui.help.alarm_help import WHAT_TO_DO

    return [kind for kind in ALARMS if kind not in WHAT_TO_DO]


if __name__ == "__main__":
    for hit in search(" ".join(sys.argv[1:]))[:5]:
        print(f"#{hit.anchor}  {hit.title}\n    {plain_text(hit)[:300]}…\n")
