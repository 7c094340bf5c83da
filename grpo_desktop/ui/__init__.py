"""The PySide6 desktop application: thin panels over the session model and the training worker.

Importing it installs `compat.guard_none_refcount()` (see compat.py: PySide6 6.12.0 on Python
before 3.12 would otherwise crash the app after a while).
"""

from grpo_desktop.ui.compat import guard_none_refcount

guard_none_refcount()
