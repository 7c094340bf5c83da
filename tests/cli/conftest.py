"""Qt guards for every test here: a Qt warning or a QThread left running fails the test; the
`show_window` fixture (tests/support/qt_guard.py)."""

from tests.support.qt_guard import _qt_strict, show_window  # noqa: F401 (fixtures)
