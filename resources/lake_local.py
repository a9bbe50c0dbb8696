"""A local lake's folders: immutable versions behind an atomically swapped symlink.

    LAKE/<asset>/day=YYYY-MM-DD  ->  .versions/day=YYYY-MM-DD/<version_id>   (relative symlink)
    LAKE/<asset>/.versions/day=YYYY-MM-DD/<version_id>/part-00000.parquet …
    LAKE/<asset>/.versions/.lock       commits of one asset take turns (flock)
    LAKE/.staging/<kind>-<owner>-…     scratch, versions being built, links being swapped

A version is built whole in `.staging`, renamed under `.versions` and only then named by the
link, which `os.replace` swaps in one step: a reader that resolves the link once sees one whole
version; a writer killed anywhere leaves the previous version named. Retired versions are
deleted after a grace period (their folder's mtime is the moment they were retired).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

VERSIONS_DIR = ".versions"
STAGING_DIR = ".staging"  # under the local root: same filesystem, so renames are atomic
LOCK_NAME = ".lock"


# ---- owners of staging entries -------------------------------------------------------------

def _host_id() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def owner_tag() -> str:
    """`<host>-<pid>-<process start>`: names a live process exactly (a reused pid starts later)."""
    started = int(psutil.Process().create_time())
    return f"{_host_id()}-{os.getpid()}-{started}"


def owner_alive(name: str) -> bool | None:
    """Whether the process that made staging entry `name` still runs; None when the name
    carries no owner (older code) or the owner is on another host."""
    fields = name.split("-")
    if len(fields) < 5 or not (fields[2].isdigit() and fields[3].isdigit()):
        return None
    host, pid, started = fields[1], int(fields[2]), int(fields[3])
    if host != _host_id():
        return None
    try:
        return int(psutil.Process(pid).create_time()) == started
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.Error:
        return True  # cannot tell: keep it


def make_staging(base: Path, kind: str) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{kind}-{owner_tag()}-", dir=base))


def clean_staging(base: Path, unowned_after_s: float) -> list[str]:
    """Remove what dead writers left in `base`; entries without an owner in their name (older
    code, other hosts) only once untouched for `unowned_after_s`. Never a live writer's."""
    if not base.is_dir():
        return []
    removed, now = [], time.time()
    for entry in base.iterdir():
        alive = owner_alive(entry.name)
        if alive or (alive is None and now - entry.lstat().st_mtime < unowned_after_s):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(str(entry))
    return removed


# ---- resolving a folder --------------------------------------------------------------------

def resolve(folder: Path) -> Path | None:
    """The version folder `folder` names now (read the link once), the folder itself where it
    is a plain folder of older code, or None."""
    try:
        target = os.readlink(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a link
            return folder if folder.is_dir() else None
        raise
    return folder.parent / target


def plain_identity(folder: Path) -> tuple[int, int] | None:
    """For a plain (unversioned) folder: what changes when it is replaced; None for a link."""
    try:
        st = folder.lstat()
    except FileNotFoundError:
        return None
    return None if os.path.islink(folder) else (st.st_ino, st.st_mtime_ns)


# ---- committing a version ------------------------------------------------------------------

def fill(staged: Path, files: dict[str, bytes | Path]) -> None:
    for name, data in files.items():
        if isinstance(data, Path):  # already written on this filesystem: move it in
            os.replace(data, staged / name)
            continue
        with open(staged / name, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())


def new_version_id() -> str:
    return f"{time.time_ns():016x}-{os.getpid()}-{secrets.token_hex(3)}"


@contextmanager
def asset_lock(asset_dir: Path) -> Iterator[None]:
    """Commits to one asset take turns; released by the kernel if the holder dies."""
    versions = asset_dir / VERSIONS_DIR
    versions.mkdir(parents=True, exist_ok=True)
    with open(versions / LOCK_NAME, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def commit(staging: Path, folder: Path, staged: Path, grace_s: float) -> None:
    """Make the whole folder `staged` what `folder` names, in one atomic swap; then collect
    retired versions of `folder` older than `grace_s`."""
    asset_dir, name = folder.parent, folder.name
    versions = asset_dir / VERSIONS_DIR / name
    with asset_lock(asset_dir):
        versions.mkdir(parents=True, exist_ok=True)
        version_id = new_version_id()
        os.rename(staged, versions / version_id)
        link = staging / f"link-{owner_tag()}-{secrets.token_hex(4)}"
        os.symlink(f"{VERSIONS_DIR}/{name}/{version_id}", link)
        _swap(link, folder, versions)
        _fsync_dir(asset_dir)
        collect(versions, {version_id}, grace_s)


def _swap(link: Path, folder: Path, versions: Path) -> None:
    previous = resolve(folder)
    if previous is not None and previous == folder:  # a plain folder of older code
        if _exchange(link, folder):
            retired = versions / new_version_id()
            os.rename(link, retired)  # the old folder, now under the link's name
        else:  # no atomic exchange here: the day is absent for the two renames
            retired = versions / new_version_id()
            os.rename(folder, retired)
            os.replace(link, folder)
        os.utime(retired)
        return
    os.replace(link, folder)
    if previous is not None and previous.is_dir():
        os.utime(previous)  # retired now: the grace period starts


def collect(versions: Path, keep: set[str], grace_s: float) -> list[str]:
    """Delete versions other than `keep` retired more than `grace_s` ago (caller holds the lock)."""
    removed, now = [], time.time()
    for entry in versions.iterdir() if versions.is_dir() else []:
        if entry.name in keep or entry.name.startswith("."):
            continue
        if now - entry.lstat().st_mtime >= grace_s:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def collect_asset(asset_dir: Path, grace_s: float) -> list[str]:
    """Collect every folder's retired versions of one asset."""
    versions_root = asset_dir / VERSIONS_DIR
    if not versions_root.is_dir():
        return []
    removed = []
    with asset_lock(asset_dir):
        for versions in versions_root.iterdir():
            if versions.name.startswith(".") or not versions.is_dir():
                continue
            current = resolve(asset_dir / versions.name)
            keep = {current.name} if current is not None and current.parent == versions else set()
            removed += collect(versions, keep, grace_s)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a))
