"""Memory registration: how long registering and deregistering memory takes, by size, and whether it leaks.

With the verbs engine, ibv_reg_mr / ibv_dereg_mr on this rank's NIC: fresh pages (the
registration pins them on first touch) and one warm buffer registered again; keys checked.
With the mpi engine, registration is creating an RMA window (Win.Allocate: the
library allocates and registers; Win.Create: it registers our memory).
"""

import pytest

from acceptance.drivers.memreg import leak, registration

pytestmark = pytest.mark.memreg
SUITE = "memreg"  # its metrics and engine needs: acceptance.rules.catalog


def test_registration_time(engine, profile, record):
    problems = registration(engine, profile, record)
    assert not problems, "slow memory registration:\n" + "\n".join(problems)


def test_registration_does_not_leak(engine, profile, record):
    problems = leak(engine, profile, record)
    assert not problems, "\n".join(problems)


def test_low_memlock_limit_is_explained(engine, profile, record):
    """Registering more than ulimit -l allows must fail with an explanation, not a bare ENOMEM."""
    if "memlock_effect" not in engine.OFFERS:
        pytest.skip(f"the {engine.NAME} engine registers through its library; the memlock effect "
                    "is shown with the verbs engine")
    size = profile.get("memreg.leak_size")
    enforced, what = engine.memlock_effect(size)
    record("memlock_enforced", int(enforced), "bool", size=size, engine=engine.NAME, detail=what)
    if enforced:
        assert "ulimit -l" in what and "unlimited" in what, what
