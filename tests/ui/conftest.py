"""Qt guards for every test here: a Qt warning or a QThread left running fails the test; the
`show_window` fixture (tests/support/qt_guard.py). For the Try and Compare tab tests:
`make_tab` (a tab on its own session model, shown, shut down after the test) and
`lora_session` (a session holding a copy of the LoRA-trained demo run)."""

from __future__ import annotations

import pytest

from tests.support.qt_guard import _qt_strict, show_window  # noqa: F401 (fixtures)
from tests.support.sessions import session_on_disk


@pytest.fixture
def make_tab(qtbot):
    """`make_tab(ViewClass, doc, train_fn=None)`: a TryView or CompareView on a SessionModel of
    `doc` (training with `train_fn` when given), shown at 1100 × 700. After the test each tab
    is shut down and any run it started is stopped and waited for."""
    from grpo_desktop.ui.session.model import SessionModel

    views = []

    def make(view_class, doc, train_fn=None):
        model = SessionModel(doc, **({"train_fn": train_fn} if train_fn else {}))
        view = view_class(model)
        view.resize(1100, 700)
        qtbot.addWidget(view)
        view.show()
        views.append(view)
        return view

    yield make
    for view in views:
        view.shutdown()
        if view.model.runner.active:
            view.model.stop()
            qtbot.waitUntil(lambda v=view: not v.model.runner.active, timeout=90_000)


@pytest.fixture
def lora_session(trained_run, tmp_path):
    """A session holding a copy of the demo model's LoRA run (conftest's `trained_run`)."""
    return session_on_disk(tmp_path, trained_run(lora=True))
