"""Help: the content (topics.py and its texts, Qt-free) and the Help window (window.py)."""
