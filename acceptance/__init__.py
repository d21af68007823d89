"""Cluster fabric acceptance harness."""
__version__ = "0.1.0"
