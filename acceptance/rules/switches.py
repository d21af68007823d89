"""Which switch tree a run is localized on: --topology PATH (ACCEPTANCE_TOPOLOGY), else the
profile's topology.switches, read relative to the profile's own folder."""

from __future__ import annotations

import os
from pathlib import Path

from ..switchtree.fabric import Fabric
from .profile import Profile
from ..switchtree.topofiles import load_fabric

ENV = "ACCEPTANCE_TOPOLOGY"


def switches_path(profile: Profile, path=None) -> Path | None:
    """The tree file or folder to read: `path` (or $ACCEPTANCE_TOPOLOGY when path is None), else the
    profile's topology.switches; None when neither names one."""
    if path is None:
        path = os.environ.get(ENV) or None
    if path:
        return Path(path).expanduser()
    named = profile.get("topology.switches")
    if not named:
        return None
    p = Path(named).expanduser()
    if not p.is_absolute() and profile.source and Path(profile.source).is_file():
        p = Path(profile.source).parent / p
    return p


def fabric_for(profile: Profile, path=None) -> Fabric | None:
    """The switch tree (topofiles.TopologyFileError naming file, line and why), or None."""
    p = switches_path(profile, path)
    if p is None:
        return None
    return load_fabric(p)
