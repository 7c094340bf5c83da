"""The saved session document and the run histories the window shows: pure Python, no Qt, no torch.

A session (document.py) is a folder bundle holding the settings and the run; history.py and
rollouts.py replay a run's events for the plots and the Rollouts tab; run_folder.py, trl_run.py
and friends read runs that someone else writes; trust.py remembers which code may run; recovery.py
keeps unsaved edits through a crash. See docs/architecture.md for the layers.
"""
