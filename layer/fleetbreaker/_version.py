"""The package version: one place, read by the package, its build and its tracer."""

__version__ = "0.1.0"
