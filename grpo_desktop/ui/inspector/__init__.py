"""The Rollouts tab: the filterable table of every answer (table), the selected answer's detail (detail), and the view that holds them."""
