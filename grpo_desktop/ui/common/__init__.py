"""Building blocks shared by the views: small widgets, the config form, the wheel guard, the code
editor, short background tasks and the long-job runner (job_thread.py).

What lives where: grpo_desktop/ui/README.md.
"""
