"""Help's content (grpo_desktop/ui/help/topics.py and its texts), without Qt: every alarm kind and
every training plot has an entry, every link inside an entry goes somewhere, search finds the
newcomer's words, and the worked example agrees with the lesson's numbers."""

from __future__ import annotations

import re

from grpo_desktop.engine.alarm_kinds import ALARMS
from grpo_desktop.ui.help import topics as T


def test_every_alarm_kind_has_an_entry_with_its_explanation_and_what_to_do():
    assert T.missing_alarm_entries() == []  # a new kind in alarm_kinds.py needs its Help text
    for kind, info in ALARMS.items():
        entry = T.topic(T.alarm_anchor(kind))
        assert entry is not None and entry.title == info.title
        text = T.plain_text(entry)
        assert info.explanation in text  # read from alarm_kinds, not retyped
        assert "Where to look." in text and "What usually helps." in text
    overview = T.topic("health-alarms")
    assert {f"alarm-{k}" for k in ALARMS} <= set(overview.links())  # each reachable from it


def test_every_internal_link_resolves_and_lab_links_name_a_lab_tab():
    for entry in T.TOPICS.values():
        for target in entry.links():
            if target.startswith("lab:"):
                assert target[4:] in T.LAB_TABS, (entry.anchor, target)
            else:
                assert target in T.TOPICS, (entry.anchor, target)
        page = T.render(entry.anchor)
        for href in re.findall(r'href="([^"]+)"', page):
            assert href.startswith("lab:") or href[1:] in T.TOPICS, (entry.anchor, href)
        assert "[[" not in page and "**" not in page  # no markup left over


def test_search_finds_advantage_first_and_words_inside_texts():
    hits = [t.anchor for t in T.search("advantage")]
    assert hits[0] == "advantage" and "plot-hist" in hits
    assert T.search("ADVANTAGE")[0].anchor == "advantage"  # case does not matter
    assert "no-signal" in [t.anchor for t in T.search("same score")]  # by keyword
    assert "kl" in [t.anchor for t in T.search("beta")][:3]
    assert T.search("no such word zzz") == []
    assert len(T.search("")) == len(T.TOPICS)


def test_sections_anchors_and_an_unknown_entry():
    assert [s for s, _ in T.by_section()] == list(T.SECTIONS)
    assert all(t.section in T.SECTIONS for t in T.TOPICS.values())
    assert all(re.fullmatch(r"[a-z][a-z0-9_-]*", a) for a in T.TOPICS)  # stable, URL-safe
    assert T.topic("#advantage").anchor == "advantage"
    assert "No entry" in T.render("not-an-entry") and 'href="#how-grpo-learns"' in T.render("x")


def test_worked_example_numbers_match_the_lesson():
    # rewards [1, 0, 0, 0]: mean 0.25, population std sqrt(0.1875) = 0.433,
    # A = 0.75 / 0.433 = +1.732 and -0.25 / 0.433 = -0.577 (docs/grpo.md's check values)
    mean = 0.25
    std = (sum((r - mean) ** 2 for r in (1, 0, 0, 0)) / 4) ** 0.5
    right, wrong = f"+{(1 - mean) / std:.3f}", f"−{mean / std:.3f}"
    for anchor in ("how-grpo-learns", "advantage"):
        text = T.plain_text(T.topic(anchor))
        assert right in text and wrong in text and "0.433" in text
    # 1 − p^G − (1 − p)^G: p = 3 %, G = 4 -> 11.5 %; p = 70 %, G = 8 -> 94.2 %
    for p, g in ((0.03, 4), (0.70, 8)):
        share = f"{100 * (1 - p**g - (1 - p) ** g):.1f} %"
        assert share in T.plain_text(T.topic("no-signal"))
