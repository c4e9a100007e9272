"""lazypatch's benchmarks: the performance budget of COSTS.md, measured side by side.

Run ``python benchmarks/run.py [--quick]``. Every figure is measured against
a baseline in the same run (whole interpreter processes, interleaved, median
and spread; instruction counts from valgrind's callgrind where available) and
reported as a ratio or difference, never asserted as a wall-clock time.
"""
