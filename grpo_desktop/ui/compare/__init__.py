"""The Compare tab: before and after, problem by problem (view.py)."""
