"""What the benchmarks and evaluations share: one way to compute percentiles, read CPU time, start
the test brokers, build a checkout of another revision and print a before/after table.

Scripts import from here and never from one another, so a measurement changes in one place.
"""
