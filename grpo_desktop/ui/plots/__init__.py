"""Live training plots: the grid (view.py), its curves and ranges (kit.py), decimation, the
advantage histogram and heat map, the alarm markers, PNG/SVG export.

What lives where: grpo_desktop/ui/README.md.
"""
