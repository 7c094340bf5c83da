"""The Try tab (`try` is a Python keyword): the base model and a checkpoint answer the same prompt
side by side (view.py), the problem picker, one answer pane, the job's thread (worker.py).

What lives where: grpo_desktop/ui/README.md.
"""
