"""External programs the harness drives (perftest)."""
