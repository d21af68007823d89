"""The run folder, its records, and whether two runs compare."""
