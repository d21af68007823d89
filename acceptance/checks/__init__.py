"""Node checks: each reads one node's facts (acceptance.host) and returns its problems, judged by the
profile's bounds (acceptance.rules). `acceptance node-check` runs them on one node and keeps their
state between runs (state.py, slurm.py); the preflight suite (acceptance.drivers.preflight) asks the
same per-node judgements of every node of a job, so a fault reads the same and gets the same advice
wherever it is found.

  base.py      Problem, Outcome, Context; "could not run" (never a failure) and the judge's preflight bounds
  rails.py     which RDMA ports are rails, which are not (a management or VM-network NIC, a bond), which are missing
  ports.py     rail ports up, at the profile's rate, link layer and MTU; a rail's netdev where it stands in
  counters.py  port counters since the last check, classed by meaning (acceptance.host.counter_kinds)
  pcie.py      PCIe links at what they can train to
  memlock.py   RLIMIT_MEMLOCK, with the one advice for raising it
  gpudirect.py nvidia_peermem or dma-buf
  gpus.py      NVML: count, ECC, row remapping, throttling, temperature; a lost GPU
  xid.py       Xid events in the kernel log, sticky until a reboot
  runner.py    every check at once within the deadline; the verdict
  state.py     the node's state file between checks
  slurm.py     what --slurm does to the node: drain, resume, leave
"""
