"""The Compare tab: before and after, problem by problem.

The tab is view.py; what lives where: grpo_desktop/ui/README.md.
"""
