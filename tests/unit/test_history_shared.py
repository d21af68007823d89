"""The history store on shared storage (docs/history.md, "On shared storage"): the mount of the store's
folder read from real-shaped /proc/self/mountinfo lines, the journal mode and locking chosen for each
filesystem, what is refused and how it says so, and two processes ingesting into one store at once,
on this machine's disk as it is and as a network filesystem (the mount table stood in for)."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acceptance.cli import main
from acceptance.history import storage
from acceptance.history import store as store_module
from acceptance.history.storage import (ENV_LOCKS, LOCK_NAME, Mount, locks, mount_at, mount_of, parse_mountinfo,
                                        placement)
from acceptance.history.store import Store, StoreError
from tests.synthetic import make_run

NIGHTLY = str(Path(__file__).resolve().parents[1] / "profiles" / "nightly.toml")
REPO = Path(__file__).resolve().parents[2]

# A compute node's mount table (proc(5) format), as the kernel writes it.
NODE = "\n".join([
    "22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
    "28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
    "95 28 0:48 / /shared rw,relatime shared:52 - nfs4 fs01.cluster:/export/shared rw,vers=4.2,rsize=1048576,"
    "wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.1.0.17,local_lock=none,"
    "addr=10.1.0.2",
    "96 28 0:49 / /scratch rw,relatime shared:53 - nfs fs02:/scratch rw,vers=3,rsize=1048576,wsize=1048576,"
    "namlen=255,hard,nolock,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.1.0.3,mountvers=3,mountport=20048,"
    "mountproto=udp,local_lock=all,addr=10.1.0.3",
    "97 28 0:50 / /lustre rw,relatime shared:54 - lustre 10.2.0.1@o2ib:10.2.0.2@o2ib:/lfs01 rw,flock,lazystatfs,"
    "encrypt",
    "98 28 0:51 / /lustre2 rw,relatime shared:55 - lustre 10.2.0.1@o2ib:/lfs02 rw,localflock,lazystatfs",
    "99 28 259:3 / /data/local\\040disk rw,noatime shared:60 - xfs /dev/nvme1n1 rw,attr2,inode64,logbufs=8,"
    "logbsize=32k,noquota",
    # a bind mount of a folder of the root disk, and one of a folder of the NFS export
    "100 28 259:2 /srv/hist /opt/hist rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
    "101 28 0:48 /acceptance/history /home/ops/history rw,relatime shared:52 - nfs4 fs01.cluster:/export/shared "
    "rw,vers=4.2,hard,proto=tcp,sec=sys,local_lock=none,addr=10.1.0.2",
    # a tmpfs over a folder of the nolock mount, then a second mount stacked on the same point
    "102 96 0:52 / /scratch/fast rw,relatime shared:61 - tmpfs tmpfs rw,size=1048576k",
    "103 102 0:53 / /scratch/fast rw,relatime shared:62 - nfs4 fs03:/fast rw,vers=4.1,hard,local_lock=none,"
    "addr=10.1.0.4",
])
# A container's: the root is an overlay, the cluster's NFS bound in.
CONTAINER = "\n".join([
    "611 540 0:120 / / rw,relatime master:313 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/AB:"
    "/var/lib/docker/overlay2/l/CD,upperdir=/var/lib/docker/overlay2/9f/diff,workdir=/var/lib/docker/overlay2/9f/work",
    "612 611 0:123 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw",
    "640 611 0:48 /acceptance /shared/acceptance rw,relatime - nfs4 fs01.cluster:/export/shared rw,vers=4.2,"
    "hard,proto=tcp,sec=sys,local_lock=none,addr=10.1.0.2",
])


def _at(path: str, table: str = NODE) -> Mount:
    return mount_at(path, parse_mountinfo(table))


def test_mountinfo_lines_parse_into_mount_point_type_source_and_options():
    mounts = {m.point: m for m in parse_mountinfo(NODE)}
    nfs = mounts["/shared"]
    assert (nfs.fstype, nfs.source, nfs.root) == ("nfs4", "fs01.cluster:/export/shared", "/")
    assert nfs.option("vers") == "4.2" and nfs.option("local_lock") == "none" and nfs.option("hard") == "hard"
    assert nfs.option("relatime") == "relatime"  # the mount's own options are there too
    assert mounts["/scratch"].option("nolock") and mounts["/scratch"].option("local_lock") == "all"
    assert mounts["/lustre"].source == "10.2.0.1@o2ib:10.2.0.2@o2ib:/lfs01" and mounts["/lustre"].option("flock")
    assert "/data/local disk" in mounts  # \040 is a space
    assert mounts["/home/ops/history"].root == "/acceptance/history"
    assert parse_mountinfo("garbage\n\n1 2 3\n") == []


@pytest.mark.parametrize("path, point, fstype", [
    ("/shared/acceptance/history", "/shared", "nfs4"),
    ("/shared", "/shared", "nfs4"),
    ("/sharedfoo/history", "/", "ext4"),               # a prefix of the name is not a prefix of the path
    ("/scratch/h", "/scratch", "nfs"),
    ("/scratch/fast/h", "/scratch/fast", "nfs4"),      # stacked: the last mount on the point is on top
    ("/lustre/ops/h", "/lustre", "lustre"),
    ("/data/local disk/history", "/data/local disk", "xfs"),
    ("/opt/hist/h", "/opt/hist", "ext4"),              # bind mount of the root disk
    ("/home/ops/history", "/home/ops/history", "nfs4"),  # bind mount of the NFS export
    ("/var/lib/acceptance/history", "/", "ext4"),
])
def test_the_longest_mount_point_holding_the_path_is_its_mount(path, point, fstype):
    m = _at(path)
    assert (m.point, m.fstype) == (point, fstype)


def test_in_a_container_the_root_is_an_overlay_and_the_bound_nfs_is_nfs():
    assert _at("/work/history", CONTAINER).fstype == "overlay"
    assert _at("/shared/acceptance/history", CONTAINER).fstype == "nfs4"
    assert locks(_at("/work/history", CONTAINER))[0] == "local"


def _line(point: Path, fstype: str, source: str = "srv:/export", supers: str = "rw") -> str:
    escaped = str(point).replace("\\", "\\134").replace(" ", "\\040")
    return f"28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" \
           f"95 28 0:48 / {escaped} rw,relatime shared:52 - {fstype} {source} {supers}\n"


NFS4_OK = ("nfs4", "fs01:/export/shared", "rw,vers=4.2,hard,proto=tcp,sec=sys,local_lock=none,addr=10.1.0.2")
NFS3_NOLOCK = ("nfs", "fs02:/scratch", "rw,vers=3,hard,nolock,proto=tcp,mountvers=3,local_lock=all,addr=10.1.0.3")


@pytest.mark.parametrize("fstype, supers, mode, refused", [
    ("ext4", "rw,errors=remount-ro", "wal", None),
    ("xfs", "rw,attr2,inode64,noquota", "wal", None),
    ("overlay", "rw,lowerdir=/a:/b,upperdir=/c,workdir=/d", "wal", None),
    ("tmpfs", "rw,size=1048576k", "wal", None),
    ("nfs4", NFS4_OK[2], "delete", None),
    ("nfs", "rw,vers=3,hard,proto=tcp,mountvers=3,local_lock=none,addr=10.1.0.3", "delete", None),
    ("nfs", "rw,vers=3,hard,proto=tcp,local_lock=flock,addr=10.1.0.3", "delete", None),  # flock() local; fcntl not
    ("nfs", NFS3_NOLOCK[2], "delete", "mounted with nolock"),
    ("nfs4", "rw,vers=4.2,hard,local_lock=posix,addr=10.1.0.2", "delete", "local_lock=posix"),
    ("lustre", "rw,flock,lazystatfs", "delete", None),
    ("lustre", "rw,lazystatfs", "delete", None),          # noflock by default on old clients: the lock probe says
    ("lustre", "rw,localflock,lazystatfs", "delete", "localflock"),
    ("gpfs", "rw", "delete", None),
    ("ceph", "rw,name=admin,secret=<hidden>,acl", "delete", None),
    ("fuse.glusterfs", "rw,user_id=0,group_id=0,default_permissions,allow_other", "delete", None),
    ("cifs", "rw,vers=3.1.1,cache=strict,nobrl,soft", "delete", "nobrl"),
    ("gfs2", "rw,localflocks", "delete", "localflocks"),
    ("fuse.sshfs", "rw,user_id=0,group_id=0", "delete", "fuse.sshfs keeps its locks on each node"),
    ("wekafs", "rw,relatime", "delete", ENV_LOCKS),        # not known: it says how to vouch for it
])
def test_the_journal_mode_and_locking_chosen_for_each_filesystem(tmp_path, fstype, supers, mode, refused):
    got = placement(tmp_path, _line(tmp_path, fstype, "srv:/x", supers))
    assert got.mount.fstype == fstype and got.journal_mode == mode
    assert got.shared == (mode == "delete")
    if refused:
        assert got.refusal and refused in got.refusal and str(tmp_path) in got.refusal
    else:
        assert got.refusal is None, got.refusal


def test_an_unknown_filesystem_vouched_for_is_used_with_the_rollback_journal_and_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_LOCKS, "cluster")
    got = placement(tmp_path, _line(tmp_path, "wekafs"))
    assert (got.refusal, got.journal_mode, got.shared) == (None, "delete", True)
    # vouching does not make node-local locks cluster-wide
    assert placement(tmp_path, _line(tmp_path, *NFS3_NOLOCK)).refusal


@pytest.mark.parametrize("setting, refused", [("true", False), ("false", True), (None, True)])
def test_beegfs_needs_global_file_locks_in_its_client_config(tmp_path, setting, refused):
    cfg = tmp_path / "beegfs-client.conf"
    cfg.write_text("sysMgmtdHost = mgmt01\n" + (f"tuneUseGlobalFileLocks     = {setting}\n" if setting else ""))
    got = placement(tmp_path, _line(tmp_path, "beegfs", "beegfs_nodev", f"rw,cfgFile={cfg},_netdev"))
    assert bool(got.refusal) == refused
    if refused:
        assert "tuneUseGlobalFileLocks" in got.refusal


def test_a_local_store_another_node_used_over_the_network_keeps_the_rollback_journal(tmp_path):
    """The NFS server's own view of the export is its local disk: history.lock says clients use it."""
    (tmp_path / LOCK_NAME).touch()
    got = placement(tmp_path, _line(tmp_path, "xfs"))
    assert (got.journal_mode, got.shared, got.refusal) == ("delete", True, None)


def test_the_refusal_names_the_mount_its_type_the_option_and_what_to_do(tmp_path):
    msg = placement(tmp_path / "h", _line(tmp_path, *NFS3_NOLOCK)).refusal
    assert f"{tmp_path} (nfs from fs02:/scratch)" in msg
    assert "nolock" in msg and "WAL" in msg
    assert "Mount it with working locks" in msg and "local disk of one host" in msg


def test_mount_of_this_machine_finds_a_mount_for_a_real_folder(tmp_path):
    m = mount_of(tmp_path / "not" / "yet")  # the nearest existing folder's
    if m is None:
        pytest.skip("no /proc/self/mountinfo")
    assert m.fstype and (str(tmp_path).startswith(m.point.rstrip("/") + "/") or m.point == "/")


# ---- the store itself, its mount table stood in for -----------------------------------------------------

def _as_mount(monkeypatch, folder: Path, fstype: str, source: str, supers: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(storage, "read_mountinfo", lambda: _line(folder.resolve(), fstype, source, supers))


def _night(root: Path, n: int) -> Path:
    d = make_run(root / f"night{n:02d}", nodes=4, rails=2, seed=n, run_id=f"night{n:02d}", profile=NIGHTLY,
                 collectives=False, memreg=False)
    run = json.loads((d / "run.json").read_text())
    run["start"] = f"2026-01-{n + 1:02d}T02:00:00Z"
    (d / "run.json").write_text(json.dumps(run))
    return d


def test_a_local_store_is_in_wal_mode(tmp_path):
    s = Store.open(tmp_path / "h")
    assert s.journal_mode() == "wal" and not s.storage.shared
    assert not (tmp_path / "h" / LOCK_NAME).exists()


def test_on_nfs_the_store_is_in_delete_mode_and_a_wal_store_is_turned_back(tmp_path, monkeypatch):
    h = tmp_path / "h"
    s = Store.open(h)  # made on a local disk: WAL
    s.ingest(_night(tmp_path, 0))
    s.close()
    s = Store.open(h)
    assert s.journal_mode() == "wal"
    s.close()
    _as_mount(monkeypatch, h, *NFS4_OK)
    s = Store.open(h)
    assert s.journal_mode() == "delete" and s.storage.shared
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert (h / LOCK_NAME).exists()
    assert not (h / "history.db-wal").exists() and not (h / "history.db-shm").exists()
    s.ingest(_night(tmp_path, 1))
    assert list(s.nights()["run_id"]) == ["night00", "night01"]
    assert not (h / "history.db-wal").exists()
    s.close()
    monkeypatch.undo()  # its NFS server sees a local disk, and history.lock: it stays in delete mode
    assert Store.open(h).journal_mode() == "delete"


def test_a_wal_store_another_process_keeps_open_is_not_turned_and_says_why(tmp_path, monkeypatch):
    """An older acceptance (WAL) with the store open: SQLite cannot leave WAL under it."""
    h = tmp_path / "h"
    Store.open(h).close()
    older = sqlite3.connect(h / "history.db", isolation_level=None)
    older.execute("SELECT count(*) FROM nights").fetchone()
    _as_mount(monkeypatch, h, *NFS4_OK)
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 1)
    with pytest.raises(StoreError, match="in WAL mode, which does not work over a network filesystem"):
        Store.open(h)
    older.close()
    s = Store.open(h)
    assert s.journal_mode() == "delete"
    s.close()


def test_a_store_on_a_nolock_mount_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    h = tmp_path / "h"
    _as_mount(monkeypatch, h, *NFS3_NOLOCK)
    with pytest.raises(StoreError, match="mounted with nolock"):
        Store.open(h)
    d = _night(tmp_path, 0)
    assert main(["history", "ingest", str(d), "--history", str(h)]) == 2
    err = capsys.readouterr().err
    assert "mounted with nolock" in err and "(nfs from fs02:/scratch)" in err and "local disk" in err
    assert not (h / "history.db").exists()


def test_a_mount_that_takes_no_locks_is_refused_at_open(tmp_path, monkeypatch):
    """NFSv3 without a lock manager answers fcntl with ENOLCK (Lustre with noflock: ENOSYS)."""
    h = tmp_path / "h"
    _as_mount(monkeypatch, h, *NFS4_OK)

    def no_locks(fd, cmd, *args):
        if cmd & storage.fcntl.LOCK_EX:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(storage.fcntl, "lockf", no_locks)
    with pytest.raises(StoreError) as e:
        Store.open(h)
    msg = str(e.value)
    assert "does not lock files" in msg and "No locks available" in msg and "(nfs4 from fs01:/export/shared)" in msg
    assert "Mount it with working locks" in msg


_HOLD = """
import sys, time
from pathlib import Path
from acceptance.history.storage import WriteLock
with WriteLock(Path(sys.argv[1]), None, 5):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_lock_another_process_holds_is_waited_for_a_bounded_time_and_named(tmp_path, monkeypatch):
    h = tmp_path / "h"
    _as_mount(monkeypatch, h, *NFS4_OK)
    Store.open(h).close()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(h / LOCK_NAME)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 1)
        t0 = time.monotonic()
        with pytest.raises(StoreError) as e:
            Store.open(h)
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert 1 <= waited < 10
    assert f"pid {holder.pid}" in str(e.value) and "held the history store's lock for 1 s" in str(e.value)
    Store.open(h).close()  # the holder's end gave it back


def _ingest_at_once(h: str, run_dirs: list[str], barrier, results, mountinfo: str | None) -> None:
    """One job: open the store, wait for the other, ingest its nights; ('ok', nights) or ('error', why)."""
    try:
        if mountinfo is not None:
            storage.read_mountinfo = lambda: mountinfo
        s = Store.open(h)
        barrier.wait(60)
        nights = [s.ingest(d).night for d in run_dirs]
        results.put(("ok", nights, s.journal_mode()))
    except BaseException as e:  # noqa: BLE001 - reported to the test, which fails on it
        results.put(("error", f"{type(e).__name__}: {e}", None))


@pytest.mark.parametrize("fs", ["local disk (WAL)", "NFS (delete + history.lock)"])
def test_two_processes_ingesting_at_once_keep_both_and_never_see_database_is_locked(tmp_path, fs):
    h = tmp_path / "h"
    h.mkdir()
    mountinfo = _line(h.resolve(), *NFS4_OK) if fs.startswith("NFS") else None
    dirs = [str(_night(tmp_path, n)) for n in range(4)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    jobs = [ctx.Process(target=_ingest_at_once, args=(str(h), dirs[i::2], barrier, results, mountinfo))
            for i in range(2)]
    for j in jobs:
        j.start()
    got = [results.get(timeout=300) for _ in jobs]
    for j in jobs:
        j.join(60)
    assert [g[0] for g in got] == ["ok", "ok"], got
    want = "delete" if mountinfo else "wal"
    assert {g[2] for g in got} == {want}
    assert len({n for g in got for n in g[1]}) == 4
    if mountinfo:
        storage_read = storage.read_mountinfo
        try:
            storage.read_mountinfo = lambda: mountinfo
            s = Store.open(h)
        finally:
            storage.read_mountinfo = storage_read
    else:
        s = Store.open(h)
    assert sorted(s.nights()["run_id"]) == [f"night{n:02d}" for n in range(4)]
    assert s.db.execute("SELECT count(*) FROM components WHERE kind='nic'").fetchone()[0] == 8
    assert s.journal_mode() == want
    assert (h / LOCK_NAME).exists() == bool(mountinfo)
