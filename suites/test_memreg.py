"""Memory registration: how long registering and deregistering memory takes, by size, and whether it leaks.

With the mpi engine, registration is creating an RMA window (Win.Allocate: the
library allocates and registers; Win.Create: it registers our memory).
"""

import pytest

from acceptance.measure.memreg import leak, registration

pytestmark = pytest.mark.memreg
ENGINE_NEEDS = ("register_times", "registration_growth")  # what the engine must offer (acceptance.fabric.engines)


def test_registration_time(engine, profile, record):
    problems = registration(engine, profile, record)
    assert not problems, "slow memory registration:\n" + "\n".join(problems)


def test_registration_does_not_leak(engine, profile, record):
    problems = leak(engine, profile, record)
    assert not problems, "\n".join(problems)
