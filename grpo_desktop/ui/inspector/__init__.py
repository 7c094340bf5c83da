"""The Rollouts tab: the filterable table of every answer (table.py), the selected answer's detail
(detail.py), and the view that holds them (view.py).

What lives where: grpo_desktop/ui/README.md.
"""
