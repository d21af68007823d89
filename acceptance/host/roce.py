"""RoCE as training runs it: the traffic class of its queue pairs, and the lossless class on the port.

NCCL marks its RoCE traffic with NCCL_IB_TC (the IP header's DSCP << 2 and ECN bits); the port maps
the DSCP to a priority and pauses that priority (PFC) before its buffers overflow, and ECN marks and
CNPs slow a sender down first. A fabric where those differ from node to node, or where training's
class is not the lossless one, drops packets under an all-to-all that a test at traffic class 0 never
sends. What is read, and from where:

- PFC per priority: `dcb -j pfc show dev <netdev>` (iproute2's DCB netlink client; the kernel's
  IEEE 802.1Qaz ops, which mlx5 implements): "prio_pfc", one true/false per priority 0..7.
- Trust mode and the DSCP -> priority table: `dcb -j app show dev <netdev> dscp-prio`: "dscp_prio",
  [dscp, priority] pairs. mlx5 trusts DSCP once the table has an entry and PCP otherwise
  (drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c, mlx5e_dcbnl_ieee_setapp); with an empty
  table a DSCP maps to priority DSCP / 8 (mlnx_qos's default dscp2prio: DSCP 24-31 -> priority 3).
- ECN per priority: <root>/class/net/<netdev>/ecn/{roce_np,roce_rp}/enable/<0..7>, "1" or "0"
  (MLNX_OFED's mlx5 sysfs, "Explicit Congestion Notification (ECN)" in its documentation: np is the
  notification point, which sends CNPs; rp the reaction point, which slows down on them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from .command import run_command
from .sysfs import read_sysfs

ENV_NCCL_IB_TC = "NCCL_IB_TC"
ENV_DCB = "ACCEPTANCE_DCB"  # the dcb command (a stand-in in tests; acceptance.runtime.overrides)
PRIORITIES = range(8)
COMMAND_TIMEOUT_S = 10.0


def traffic_class(configured: int | None, env=os.environ) -> tuple[int, str]:
    """(traffic class, where it came from): verbs.traffic_class where the profile sets it, else
    NCCL_IB_TC where the job sets it (what NCCL's own queue pairs use), else 0."""
    if configured is not None:
        return configured, "verbs.traffic_class"
    raw = env.get(ENV_NCCL_IB_TC)
    if raw is None or not raw.strip():
        return 0, "default"
    try:
        value = int(raw.strip(), 0)
    except ValueError:
        raise ValueError(f"{ENV_NCCL_IB_TC}={raw!r}: expected an integer traffic class 0..255") from None
    if not 0 <= value <= 255:
        raise ValueError(f"{ENV_NCCL_IB_TC}={raw!r}: expected an integer traffic class 0..255")
    return value, ENV_NCCL_IB_TC


def priority_of(tclass: int, dscp_prio: dict[int, int]) -> int:
    """The priority a traffic class's DSCP maps to on a port with this DSCP -> priority table."""
    dscp = tclass >> 2
    return dscp_prio.get(dscp, dscp >> 3) if dscp_prio else dscp >> 3


@dataclass(frozen=True)
class QoS:
    """One RoCE netdev's lossless settings; a None field was not readable (`problems` says why)."""

    netdev: str
    pfc: tuple[int, ...] | None          # priorities with PFC on
    trust: str | None                    # "dscp" or "pcp"
    dscp_prio: tuple[tuple[int, int], ...] | None
    ecn_np: tuple[int, ...] | None       # priorities where the port sends CNPs
    ecn_rp: tuple[int, ...] | None       # priorities where it slows down on them
    read: tuple[str, ...] = ()           # every file and command read
    problems: tuple[str, ...] = ()

    def summary(self) -> str:
        """What must be the same on every node, in words."""
        def prios(p):
            return "unreadable" if p is None else (",".join(map(str, p)) or "none")
        return (f"PFC on {prios(self.pfc)}; trust {self.trust or 'unreadable'}; "
                f"ECN notification on {prios(self.ecn_np)}, reaction on {prios(self.ecn_rp)}")

    def lossless_problems(self, tclass: int) -> list[str]:
        """What keeps traffic class `tclass` from being lossless and congestion-controlled here."""
        if self.pfc is None or self.trust is None:
            return [f"{self.netdev}: PFC or trust unreadable: {'; '.join(self.problems)}"]
        table = dict(self.dscp_prio or ())
        prio = priority_of(tclass, table)
        out = []
        if self.trust != "dscp":
            out.append(f"{self.netdev}: trust {self.trust}, not dscp: traffic class {tclass} (DSCP {tclass >> 2}) "
                       f"is not mapped by its DSCP")
        if prio not in self.pfc:
            out.append(f"{self.netdev}: traffic class {tclass} (DSCP {tclass >> 2}) maps to priority {prio}, "
                       f"which has no PFC (PFC on {','.join(map(str, self.pfc)) or 'none'})")
        for what, on in (("notification point (roce_np)", self.ecn_np), ("reaction point (roce_rp)", self.ecn_rp)):
            if on is None:
                out.append(f"{self.netdev}: ECN {what} unreadable")
            elif prio not in on:
                out.append(f"{self.netdev}: ECN {what} off on priority {prio}")
        return out


def _dcb(args: list[str]) -> tuple[dict | None, str, str | None]:
    """(its JSON or None, the command as run, why there is none)."""
    cmd = shlex.split(os.environ.get(ENV_DCB) or "dcb")
    shown = shlex.join([*cmd, *args])
    if not cmd or shutil.which(cmd[0]) is None:
        return None, shown, f"`{shown}`: {cmd[0] if cmd else '(empty)'} not found on PATH"
    ok, out = run_command([*cmd, *args], COMMAND_TIMEOUT_S)
    if not ok:
        return None, shown, f"`{shown}`: {out}"
    try:
        return json.loads(out or "{}"), shown, None
    except ValueError:
        return None, shown, f"`{shown}`: not JSON: {out[:80]!r}"


def read_qos(root: Path, netdev: str) -> QoS:
    """Every lossless setting of one netdev; never raises."""
    read, problems = [], []
    pfc_json, shown, why = _dcb(["-j", "pfc", "show", "dev", netdev])
    read.append(shown)
    pfc = None
    if pfc_json is None:
        problems.append(why)
    elif not isinstance(pfc_json.get("prio_pfc"), list):
        problems.append(f"`{shown}`: no prio_pfc")
    else:
        pfc = tuple(p for p, on in enumerate(pfc_json["prio_pfc"]) if on is True)
    app_json, shown, why = _dcb(["-j", "app", "show", "dev", netdev, "dscp-prio"])
    read.append(shown)
    trust = table = None
    if app_json is None:
        problems.append(why)
    else:
        pairs = app_json.get("dscp_prio") or []
        table = tuple(sorted((int(e[0]), int(e[1])) for e in pairs if isinstance(e, list) and len(e) >= 2))
        trust = "dscp" if table else "pcp"
    ecn = {}
    for point in ("roce_np", "roce_rp"):
        folder = root / "class" / "net" / netdev / "ecn" / point / "enable"
        values = {p: read_sysfs(folder / str(p)) for p in PRIORITIES}
        read.append(f"{folder}/{{0..7}}")
        if all(v is None for v in values.values()):
            ecn[point] = None
            problems.append(f"{folder}: missing (MLNX_OFED's ECN sysfs)")
        else:
            ecn[point] = tuple(p for p, v in values.items() if v == "1")
    return QoS(netdev, pfc, trust, table, ecn["roce_np"], ecn["roce_rp"], tuple(read), tuple(problems))
