# Every suite runs collectively: one pytest session per MPI rank, outcomes agreed at rank 0.
pytest_plugins = ["acceptance.pytest_plugin"]
