"""pyverbs, rdma-core's Python bindings, imported once: every module of the engine reaches its classes
as binding.X (pv.X), so the engine imports where pyverbs is missing (IMPORT_ERROR says why) and the
tests put fakes in one place."""

from __future__ import annotations

try:  # pyverbs builds against one rdma-core; without it the engine says why it cannot run.
    try:  # rdma-core >= v50 (and the only one from v59, Cython >= 3.1)
        import pyverbs.libibverbs_enums as e
    except ImportError:  # rdma-core <= v58, e.g. Debian 12's 44.0
        import pyverbs.enums as e
    from pyverbs.addr import GID, AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context, get_device_list
    from pyverbs.mr import MR, DmaBufMR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR
    IMPORT_ERROR: BaseException | None = None
except Exception as exc:  # noqa: BLE001 - ImportError, or OSError when libibverbs itself is missing
    IMPORT_ERROR = exc

__all__ = ["AHAttr", "CQ", "GID", "IMPORT_ERROR", "MR", "PD", "QP", "SGE", "Context", "DmaBufMR", "GlobalRoute",
           "PyverbsError", "PyverbsRDMAError", "QPAttr", "QPCap", "QPInitAttr", "RecvWR", "SendWR", "e",
           "get_device_list"]
