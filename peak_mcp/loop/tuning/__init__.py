"""Tuning a version's parameters: the search space and strategies (search.py), the fan-out of a batch over the idle
devices of one model (fanout.py), and the tune call that chooses, checks and records the best (tune.py)."""
