"""Live training plots: the grid (view), its curves and ranges (kit), decimation, the advantage histogram and heat map, PNG/SVG export."""
