# Every suite runs collectively: one pytest session per MPI rank, outcomes agreed at rank 0.
import pytest

from acceptance.fabric.engines import select

pytest_plugins = ["acceptance.pytest_plugin"]


@pytest.fixture(scope="session")
def engine(profile):
    """The measurement engine the profile asks for (run.engine); skips with the reason when unusable."""
    module, why = select(profile.get("run.engine"))
    if module is None:
        pytest.skip(why)
    return module
