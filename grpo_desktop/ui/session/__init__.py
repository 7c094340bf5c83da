"""The session in the window: the SessionModel every view reads, files, autosave and crash recovery
(controller.py), its questions (dialogs.py), the resume banner, the trust question for a model's
own code and a run folder followed read-only.

What lives where: grpo_desktop/ui/README.md.
"""
