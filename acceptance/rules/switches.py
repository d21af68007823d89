"""Which switch tree a run is localized on: --topology PATH (ACCEPTANCE_TOPOLOGY), else the
profile's topology.switches, read relative to the profile's own folder; and the routes over it:
--routes PATH (ACCEPTANCE_ROUTES), else the profile's topology.routes (forwarding tables, followed
over the tree's ibnetdiscover cabling)."""

from __future__ import annotations

import os
from pathlib import Path

from ..records.results import InputError
from ..switchtree.fabric import Fabric
from ..switchtree.lftfiles import load_routes
from ..switchtree.topofiles import load_fabric
from .profile import Profile, ProfileError, load_profile

ENV = "ACCEPTANCE_TOPOLOGY"
ROUTES_ENV = "ACCEPTANCE_ROUTES"


def _in_profile(profile: Profile, key: str) -> Path | None:
    """The path a profile key names, relative to the profile's own folder."""
    named = profile.get(key)
    if not named:
        return None
    p = Path(named).expanduser()
    if not p.is_absolute() and profile.source and Path(profile.source).is_file():
        p = Path(profile.source).parent / p
    return p


def switches_path(profile: Profile, path=None) -> Path | None:
    """The tree file or folder to read: `path` (or $ACCEPTANCE_TOPOLOGY when path is None), else the
    profile's topology.switches; None when neither names one."""
    if path is None:
        path = os.environ.get(ENV) or None
    if path:
        return Path(path).expanduser()
    return _in_profile(profile, "topology.switches")


def routes_path(profile: Profile, path=None) -> Path | None:
    """The forwarding tables' file or folder, made absolute (run.json names it): `routes` (or
    $ACCEPTANCE_ROUTES when it is None), else the profile's topology.routes; None when none names one."""
    if path is None:
        path = os.environ.get(ROUTES_ENV) or None
    p = Path(path).expanduser() if path else _in_profile(profile, "topology.routes")
    return p.absolute() if p else None


def fabric_for(profile: Profile, path=None, routes=None) -> Fabric | None:
    """The switch tree, with its routes where `routes` or the profile names them
    (topofiles.TopologyFileError naming file, line and why), or None."""
    p = switches_path(profile, path)
    tables_at = routes_path(profile, routes)
    if p is None:
        if tables_at is not None:
            raise InputError(f"the routes ({tables_at}) need the switch tree's cabling: give --topology or set "
                             f"topology.switches to ibnetdiscover output (a file, or a folder of rail<N> files)")
        return None
    fabric = load_fabric(p)
    if tables_at is not None:
        fabric.routes = load_routes(tables_at, fabric)
    return fabric


def kept_fabric(kept: dict) -> Fabric:
    """The switch tree run.json keeps (`kept`: its "fabric"), with the routes it followed read again
    from their files: run.json keeps only their summary. Files changed since the run (the subnet
    manager routes around a failed cable) or gone give the tree without routes, and a note why."""
    fabric = Fabric.from_json(kept)
    summary = kept.get("routes")
    if not isinstance(summary, dict):
        return fabric
    try:
        if not summary.get("source"):
            raise InputError("run.json's fabric.routes names no file")
        again = load_fabric(fabric.source)
        routes = load_routes(summary["source"], again)
    except InputError as e:
        fabric.notes.append(f"routes not followed: {e}")
        return fabric
    if routes.digest != summary.get("digest"):
        fabric.notes.append(f"{routes.source}: routes not followed: the forwarding tables or the cabling "
                            f"({fabric.source}) changed since the run, so which cables its pairs crossed is not "
                            f"known from them")
        return fabric
    fabric.cabling, fabric.routes = again.cabling, routes
    return fabric


def routes_known(profile_name: str) -> tuple[bool, str]:
    """Whether the profile's routes can be followed, and what they cover or why not (`acceptance doctor`)."""
    from .autoprofile import choose  # the node's GPUs and ports: only the doctor asks, so only it pays
    try:
        profile = choose()[0] if profile_name == "auto" else load_profile(profile_name)
        fabric = fabric_for(profile, "")
    except (InputError, ProfileError) as e:
        return False, f"profile {profile_name}: {e}"
    if fabric is None or fabric.routes is None:
        return False, (f"profile {profile.name} names no topology.routes: findings stop at a leaf's uplinks, "
                       f"not the cable (give ibroute / dump_lfts.sh output or ibdiagnet2.fdbs, docs/report.md)")
    rails = fabric.routes.summary()["rails"]
    covered = ", ".join(f"rail {r['rail']} {r['tables']}/{r['switches']}" for r in rails)
    notes = len(fabric.routes.notes)
    return True, (f"{fabric.routes.source} ({fabric.routes.format}) over {fabric.source}: switches with a table: "
                  f"{covered}{f'; {notes} note(s)' if notes else ''}")
