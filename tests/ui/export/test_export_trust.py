"""The Export dialog's TRL project carries a checker from elsewhere only once trusted (issue 26 §1):
a session written by hand (as one from elsewhere arrives) with a custom checker, opened in the
real window, kept disabled; File ▸ Export… as a TRL project then asks the app's own trust
question (TrustDialog, answered from a timer): "Keep disabled" writes nothing and says why,
"Trust and enable" exports the project with custom_checker.py, listed in its README.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QSettings

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.ui.session.dialogs import TrustDialog
from tests.support.dialogs import when_modal
from tests.support.hazards import write_session

CHECKER = "def check(completion, answer, prompt):\n    return float(answer in completion)\n"


@pytest.fixture
def window(show_window, tmp_path):
    from grpo_desktop.ui.main_window import MainWindow
    from tests.support.fakes import make_fake_train

    cfg = demo_config().replace(rewards={"custom_checker": CHECKER, "custom_weight": 0.5})
    path = write_session(str(tmp_path / "Elsewhere.grpo"), cfg)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(demo_config(), make_fake_train(), settings=settings,
                               probe_device=False))  # fmt: skip
    asked = []
    when_modal(TrustDialog, lambda d: (asked.append(d), d.keep_button.click()))
    assert w.session.open_session(path)
    assert asked and not w.model.checker_trusted()  # asked on opening, kept disabled
    return w


def test_trl_export_asks_the_trust_question_and_keeps_an_untrusted_checker_out(
    qtbot, window, tmp_path
):
    from grpo_desktop.ui.export.dialog import NOT_EXPORTED_CHECKER, ExportDialog

    dialog = ExportDialog(window.model, window)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.set_format("trl")
    out = tmp_path / "project"
    dialog.out_edit.setText(str(out))

    asked = []
    when_modal(TrustDialog, lambda d: (asked.append(d.code.toPlainText()), d.keep_button.click()))
    dialog.export_button.click()
    assert asked == [CHECKER]  # the code itself, shown before anything is written
    assert dialog.status.text() == NOT_EXPORTED_CHECKER
    assert not dialog.runner.busy and not out.exists()
    assert not window.model.checker_trusted()

    when_modal(TrustDialog, lambda d: d.trust_button.click())
    dialog.export_button.click()
    qtbot.waitUntil(lambda: not dialog.runner.busy, timeout=60_000)
    assert dialog.result is not None, dialog.status.text()
    assert (out / "custom_checker.py").read_text() == CHECKER
    readme = (out / "README.md").read_text()
    assert "`custom_checker.py` (SHA-256" in readme and "--trust-checker" in readme
    assert window.model.checker_trusted()  # trusted once, as the Reward panel's button does
    assert os.path.isfile(out / "train.py")
    dialog.close()
