"""Health alarms: watch a run's events and warn when it stops learning or games the reward.

See engine/README.md for what lives where.
"""
