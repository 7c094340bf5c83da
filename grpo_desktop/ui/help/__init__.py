"""Help: the content (topics.py and its texts, Qt-free) and the Help window (window.py).

Try it: F1 in the main window, or `python -m grpo_desktop.ui.help.topics advantage`.
"""
