"""The reader's own application, as the docs' examples import it: `from myapp import payments`.

Stand-ins the doc tests control: each client succeeds until it is told to fail.
"""
