"""Where the history store lives, and how it is kept safe there (docs/history.md, "On shared storage").

SQLite's WAL mode keeps its index in a memory-mapped -shm file that only the processes of one host
share; "WAL does not work over a network filesystem" (https://sqlite.org/wal.html). The rollback
journal (journal_mode=DELETE) needs only POSIX advisory (fcntl) locks, which work across nodes where
the mount forwards them to its server (https://sqlite.org/useovernet.html, https://sqlite.org/lockingv3.html).

So: on a local filesystem the store keeps WAL. On a network filesystem (the mount of the store's
folder, from /proc/self/mountinfo), or where history.lock is already there (a store another node
has used over the network: its server, which sees a local disk, must not turn WAL back on), the
store uses journal_mode=DELETE and every write also holds an exclusive fcntl lock on history.lock,
with a bounded wait. A mount whose locks are local to each node (NFS nolock or local_lock=all|posix,
Lustre localflock, CIFS nobrl, GFS2/OCFS2 localflocks, BeeGFS without global locks, FUSE
filesystems that keep locks in the kernel) is refused, and so is one where the lock cannot be taken
(ENOLCK: no lock manager); one whose locking cannot be told is refused unless ACCEPTANCE_HISTORY_LOCKS=cluster
says a person has checked it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
LOCK_NAME = "history.lock"
ENV_LOCKS = "ACCEPTANCE_HISTORY_LOCKS"  # "cluster": this mount's fcntl locks were checked to hold across nodes

# Filesystems on one host's own storage (or memory): WAL is safe there.
LOCAL_TYPES = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs", "nilfs2",
    "tmpfs", "ramfs", "overlay", "vfat", "msdos", "exfat", "ntfs", "ntfs3", "fuseblk", "hfsplus", "udf",
    "iso9660", "squashfs", "erofs", "devtmpfs", "ecryptfs"})
# Network or cluster filesystems whose POSIX locks reach every node (unless an option below says not).
CLUSTER_LOCK_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "ceph", "fuse.ceph-fuse", "fuse.ceph", "glusterfs", "fuse.glusterfs",
    "cifs", "smb3", "gfs2", "ocfs2", "beegfs"})
# Network filesystems whose locks never leave the node: FUSE filesystems that do not implement
# locking (the kernel then keeps the locks itself, on this node) and AFS (byte-range locks local).
NODE_LOCAL_TYPES = frozenset({"fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.goofys",
                              "fuse.mountpoint-s3", "afs", "openafs"})
# What fcntl says where the mount takes no locks at all (NFSv3 without a lock manager: ENOLCK; Lustre
# with noflock: ENOSYS; some FUSE and CIFS setups: EOPNOTSUPP / EINVAL).
NO_LOCKING = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo (proc(5)); options holds the mount's and the superblock's."""
    point: str
    fstype: str
    source: str
    root: str = "/"
    options: tuple[str, ...] = ()

    def option(self, name: str) -> str | None:
        """`name` for a flag that is set, its value for name=value, None when absent (the last one wins)."""
        found = None
        for o in self.options:
            key, _, value = o.partition("=")
            if key == name:
                found = value if _ else key
        return found

    def __str__(self) -> str:
        return f"{self.point} ({self.fstype} from {self.source})"


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as \\040, \\011, \\012 and \\134."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line, in order (a later mount on the same point is on top)."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 10:
            continue
        sep = fields.index("-", 6)
        if len(fields) < sep + 3:
            continue
        fstype, source = fields[sep + 1], _unescape(fields[sep + 2])
        supers = fields[sep + 3] if len(fields) > sep + 3 else ""
        options = tuple(o for o in (fields[5] + "," + supers).split(",") if o)
        out.append(Mount(_unescape(fields[4]), fstype, source, _unescape(fields[3]), options))
    return out


def read_mountinfo() -> str | None:
    try:
        return Path(MOUNTINFO).read_text()
    except OSError:
        return None  # not Linux: no way to tell; see placement()


def mount_of(path, mountinfo: str | None = None) -> Mount | None:
    """The mount holding `path`: that of its nearest existing folder, links resolved (None where
    there is no /proc/self/mountinfo)."""
    text = read_mountinfo() if mountinfo is None else mountinfo
    if text is None:
        return None
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return mount_at(os.path.realpath(p), parse_mountinfo(text))


def mount_at(real: str, mounts: list[Mount]) -> Mount | None:
    """The mount of an absolute, resolved path: the longest mount point that is a prefix of it, the
    last such line where mounts are stacked on one point."""
    best, best_len = None, -1
    for m in mounts:
        point = m.point.rstrip("/") or "/"
        if point == "/" or real == point or real.startswith(point + "/"):
            if len(point) >= best_len:
                best, best_len = m, len(point)
    return best


@dataclass(frozen=True)
class Placement:
    """How a store is used where it is: journal mode, whether each write holds history.lock, and
    why; `refusal` is the message when it cannot be used safely at all."""
    mount: Mount | None
    journal_mode: str            # "wal" or "delete"
    shared: bool                 # every write holds history.lock (fcntl, exclusive)
    why: str
    refusal: str | None = None


def locks(mount: Mount) -> tuple[str, str]:
    """("local" | "cluster" | "node" | "unknown", why): whether this mount is one host's, and if not
    whether its POSIX locks exclude a process on another node."""
    t, opt = mount.fstype, mount.option
    if t in LOCAL_TYPES:
        return "local", f"{t} is a local filesystem"
    if t in ("nfs", "nfs4"):
        if opt("nolock"):
            return "node", "mounted with nolock: NFS keeps its locks on each client"
        if opt("local_lock") in ("all", "posix"):
            return "node", f"mounted with local_lock={opt('local_lock')}: NFS keeps its POSIX locks on each client"
        return "cluster", f"NFS ({opt('vers') or t}) takes POSIX locks on the server"
    if t == "lustre":
        if opt("localflock"):
            return "node", "mounted with localflock: Lustre keeps its locks on each client"
        if opt("noflock"):
            return "node", "mounted with noflock: Lustre refuses locks"
        return "cluster", "Lustre (-o flock) takes locks on its servers"
    if t in ("cifs", "smb3"):
        if opt("nobrl"):
            return "node", "mounted with nobrl: CIFS keeps its byte-range locks on each client"
        return "cluster", "CIFS sends byte-range locks to the server"
    if t in ("gfs2", "ocfs2"):
        if opt("localflocks"):
            return "node", f"mounted with localflocks: {t} keeps its locks on each node"
        return "cluster", f"{t} takes POSIX locks through its cluster lock manager"
    if t == "beegfs":
        return _beegfs(mount)
    if t in CLUSTER_LOCK_TYPES:
        return "cluster", f"{t} takes POSIX locks across its clients"
    if t in NODE_LOCAL_TYPES:
        return "node", f"{t} keeps its locks on each node"
    return "unknown", f"{t} is not a filesystem acceptance knows"


def _beegfs(mount: Mount) -> tuple[str, str]:
    """BeeGFS holds fcntl locks on the client unless beegfs-client.conf sets tuneUseGlobalFileLocks."""
    cfg = mount.option("cfgFile") or "/etc/beegfs/beegfs-client.conf"
    try:
        text = Path(cfg).read_text()
    except OSError:
        return "unknown", f"BeeGFS locks are client-local unless tuneUseGlobalFileLocks=true, and {cfg} cannot be read"
    m = re.search(r"^\s*tuneUseGlobalFileLocks\s*=\s*(\S+)", text, re.M)
    if m and m.group(1).lower() == "true":
        return "cluster", f"BeeGFS with tuneUseGlobalFileLocks=true ({cfg})"
    return "node", f"BeeGFS without tuneUseGlobalFileLocks=true ({cfg}) keeps its locks on each client"


_WHAT_TO_DO = ("Mount it with working locks (NFS: without nolock and with local_lock=none, lockd/statd running "
               "for NFSv3, or NFSv4; Lustre: -o flock), or keep the store on a local disk of one host and "
               "run every history command that writes (ingest, check, pin, prune) on that host, copying "
               "the folder elsewhere only to read it.")


def placement(path, mountinfo: str | None = None) -> Placement:
    """How the store in folder `path` is to be used (read before its database is opened)."""
    path = Path(path)
    mount = mount_of(path, mountinfo)
    marked = (path / LOCK_NAME).exists()
    if mount is None:  # no /proc/self/mountinfo (not Linux): a workstation's disk
        if marked:
            return Placement(None, "delete", True, f"{LOCK_NAME} is there (a store used over the network)")
        return Placement(None, "wal", False, "the filesystem cannot be told (no /proc/self/mountinfo)")
    kind, why = locks(mount)
    if kind == "local":
        if marked:
            return Placement(mount, "delete", True,
                             f"{why}, but {LOCK_NAME} is there: other nodes use this store over the network")
        return Placement(mount, "wal", False, why)
    if kind == "unknown" and os.environ.get(ENV_LOCKS) == "cluster":
        return Placement(mount, "delete", True, f"{why}; {ENV_LOCKS}=cluster says its locks hold across nodes")
    if kind == "cluster":
        return Placement(mount, "delete", True, why)
    if kind == "node":
        refusal = (f"{path}: the history store is on {mount}, {why}. Two jobs on two nodes could then write "
                   f"history.db at once and corrupt it, and SQLite's WAL mode does not work over a network "
                   f"filesystem at all. {_WHAT_TO_DO}")
    else:
        refusal = (f"{path}: the history store is on {mount}; {why}, so whether its file locks keep a job on "
                   f"another node out cannot be told, and SQLite's WAL mode does not work over a network "
                   f"filesystem. If you have checked that POSIX (fcntl) locks on this mount exclude processes "
                   f"on other nodes, set {ENV_LOCKS}=cluster. Otherwise: {_WHAT_TO_DO}")
    return Placement(mount, "delete", True, why, refusal)


class LockError(Exception):
    """The store's lock could not be had; str() says why and what to do."""


class WriteLock:
    """An exclusive fcntl (POSIX) lock on history.lock for the length of a write, re-entrant within
    one Store. The file is opened for each outermost hold and closed after it: POSIX locks belong to
    the process, and closing any descriptor of the file drops them, so none stays open between
    writes. The wait is bounded (polled: a blocking lock cannot time out); the holder writes its
    host, pid and time into the file, for the message a waiter gives up with."""

    def __init__(self, file: Path, mount: Mount | None, timeout: float):
        self.file, self.mount, self.timeout = Path(file), mount, timeout
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self):
        if self._depth == 0:
            self._fd = self._acquire()
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.lockf(fd, fcntl.LOCK_UN)
            except OSError:
                pass  # closing drops it anyway
            os.close(fd)
        return False

    def _acquire(self) -> int:
        try:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o664)
        except OSError as e:
            raise LockError(f"{self.file}: cannot open the history store's lock file: {e.strerror or e}") from None
        try:
            deadline, pause = time.monotonic() + self.timeout, 0.02
            while True:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno in NO_LOCKING:
                        raise LockError(self._no_locking(e)) from None
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise LockError(f"{self.file}: cannot lock the history store: {e.strerror or e}") from None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LockError(f"{self.file}: another job has held the history store's lock for "
                                    f"{self.timeout:g} s ({self._holder(fd)}); one ingest holds it for seconds, "
                                    f"so that job is stuck: end it, and run this again (the lock goes with "
                                    f"its process)")
                time.sleep(min(pause, left))
                pause = min(pause * 2, 1.0)
            stamp = f"{socket.gethostname()} pid {os.getpid()} since " \
                    f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\n".encode()
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, stamp, 0)
            except OSError:
                pass  # who holds it is for messages only
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _holder(self, fd: int) -> str:
        try:
            text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        except OSError:
            text = ""
        return f"held by {text}" if text else "its holder did not say who it is"

    def _no_locking(self, e: OSError) -> str:
        where = f"{self.mount}" if self.mount else "its filesystem"
        return (f"{self.file}: {where} does not lock files (fcntl: {e.strerror or e}), so SQLite cannot keep "
                f"two writers on two nodes apart there. {_WHAT_TO_DO}")
