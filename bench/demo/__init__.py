"""`make demo`: one payment-API outage, a fleet of Lambda containers, two kinds of breaker.

Run with ``python -m bench.demo`` (``--help`` for the options). See ``__main__`` for the
command line, ``runner`` for what runs, and the README for what the figures mean.
"""
