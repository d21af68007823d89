"""How a number is taken: timing loops, verification, percentiles, size sweeps and units.

Plain numpy: the measurement driver imports this without pytest or mpi4py.
"""
from .stats import PERCENTILES, Percentiles, nearest_rank, percentiles, samples_needed
from .sweep import Sweep, sizes, sweep_from_profile
from .timing import timed, timed_capped, timed_sequence, timed_total
from .verify import Policy, Tally, timed_verified
from .units import gbit_per_s, gbyte_per_s, us

__all__ = [
    "PERCENTILES", "Percentiles", "Policy", "Sweep", "Tally", "gbit_per_s", "gbyte_per_s",
    "nearest_rank", "percentiles", "samples_needed", "sizes", "sweep_from_profile",
    "timed", "timed_capped", "timed_sequence", "timed_total", "timed_verified", "us",
]
