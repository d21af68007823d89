"""Exports of a run for other tools (Prometheus textfile)."""
