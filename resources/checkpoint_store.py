"""The checkpoint store: `ROOT/<stage>/<version>/` in a local folder or under `s3://bucket/prefix`.

A checkpoint folder holds the weights (safetensors), the tokenizer, `lineage.json` and a model
card (`README.md`). Its version is the first 16 hex digits of its content hash: a sha256 over
the (relative path, sha256) pairs of every file except the lineage and the card, so the same
weights always get the same version and a version names exactly one set of bytes.

`lineage.json` is written last: a folder without it is an unfinished publish and is never
listed. Plain Python (boto3 for S3): the training scripts publish from a GPU pod with it, and
the Dagster resource and the CLI read with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resources.s3 import any_object, list_objects, list_prefixes, make_s3_client, parse_s3_uri

LINEAGE_FILE = "lineage.json"
CARD_FILE = "README.md"
_NOT_CONTENT = {LINEAGE_FILE, CARD_FILE}
_STAGING = ".staging"
RUNS = ".runs"  # per-run stage configs and resumable training state; never a stage (not a _NAME)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
VERSION_CHARS = 16


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_NOT_HASHED = ("runs/",)  # TensorBoard event files: published with the weights, not what names them


def checkpoint_files(folder: Path) -> list[Path]:
    """The files a publish copies (everything but the lineage and the card), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in _NOT_CONTENT)


def content_files(folder: Path) -> list[Path]:
    """The files that make a checkpoint's content (what its version hashes), sorted by relative path."""
    return [p for p in checkpoint_files(folder) if not p.relative_to(folder).as_posix().startswith(_NOT_HASHED)]


def content_sha256(folder: Path) -> str:
    """sha256 over `relative/path \\x1f file-sha256 \\n` of every content file."""
    digest = hashlib.sha256()
    for path in content_files(folder):
        digest.update(f"{path.relative_to(folder).as_posix()}\x1f{_file_sha256(path)}\n".encode())
    return digest.hexdigest()


def _checked(kind: str, name: str) -> str:
    if not _NAME.match(name or ""):
        raise ValueError(f"bad checkpoint {kind} {name!r}: letters, digits, _ . - only")
    return name


@dataclass(frozen=True)
class CheckpointRef:
    stage: str
    version: str
    sha256: str
    uri: str  # the folder: a local path or s3://…

    @property
    def id(self) -> str:
        return f"{self.stage}/{self.version}"

    def to_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "version": self.version, "sha256": self.sha256, "uri": self.uri}


class CheckpointNotFound(LookupError):
    """No such checkpoint (or no checkpoint of a stage yet)."""


class CheckpointStore:
    """Publish, list and fetch checkpoints under one root (folder or s3://)."""

    def __init__(self, root: str, endpoint_url: str | None = None, cache_dir: str | None = None) -> None:
        self.root = root.rstrip("/") if root.startswith("s3://") else str(Path(root).resolve())
        self.endpoint_url = endpoint_url
        self.cache_dir = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "shopdistill-checkpoints"
        self._client: Any = None

    @property
    def is_s3(self) -> bool:
        return self.root.startswith("s3://")

    # -- publishing ----------------------------------------------------------------------

    def publish(self, stage: str, folder: Path, lineage: dict[str, Any], card: str) -> CheckpointRef:
        """Copy `folder` in as `stage/<content version>/`, with its lineage and card; idempotent
        for the same content (the lineage and card of the last publish win)."""
        _checked("stage", stage)
        sha = content_sha256(folder)
        ref = CheckpointRef(stage, sha[:VERSION_CHARS], sha, self._uri(stage, sha[:VERSION_CHARS]))
        lineage = {**lineage, "checkpoint": ref.to_dict()}
        extra = {LINEAGE_FILE: json.dumps(lineage, indent=1, sort_keys=True, default=str) + "\n", CARD_FILE: card}
        if self.is_s3:
            self._publish_s3(ref, folder, extra)
        else:
            self._publish_local(ref, folder, extra)
        return ref

    def _publish_local(self, ref: CheckpointRef, folder: Path, extra: dict[str, str]) -> None:
        dest = Path(ref.uri)
        if not (dest / LINEAGE_FILE).exists():
            staging = Path(self.root) / _STAGING / f"{ref.stage}-{ref.version}-{uuid.uuid4().hex[:8]}"
            staging.parent.mkdir(parents=True, exist_ok=True)
            try:
                for path in checkpoint_files(folder):
                    target = staging / path.relative_to(folder)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():  # an unfinished earlier publish of the same content
                    shutil.rmtree(dest)
                os.replace(staging, dest)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        for name in (CARD_FILE, LINEAGE_FILE):  # lineage last: it marks the folder complete
            tmp = dest / f".{name}.{uuid.uuid4().hex[:8]}"
            tmp.write_text(extra[name])
            os.replace(tmp, dest / name)

    def _publish_s3(self, ref: CheckpointRef, folder: Path, extra: dict[str, str]) -> None:
        bucket, prefix = self._split(ref.uri)
        client = self._s3()
        for path in checkpoint_files(folder):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")
        for name in (CARD_FILE, LINEAGE_FILE):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=extra[name].encode())

    # -- reading -------------------------------------------------------------------------

    def stages(self) -> list[str]:
        return sorted(name for name in self._children("") if _NAME.match(name) and name != _STAGING)

    def list(self, stage: str) -> list[CheckpointRef]:
        """Complete checkpoints of a stage, oldest publish first."""
        refs = []
        for version in self._children(_checked("stage", stage)):
            lineage = self._read_lineage(stage, version)
            if lineage is not None:
                refs.append((lineage.get("created_at", ""), CheckpointRef(stage, version, lineage["checkpoint"]["sha256"],
                                                                          self._uri(stage, version))))
        return [ref for _, ref in sorted(refs, key=lambda item: (item[0], item[1].version))]

    def latest(self, stage: str) -> CheckpointRef:
        refs = self.list(stage)
        if not refs:
            raise CheckpointNotFound(f"no {stage} checkpoint in {self.root}: materialize the {stage} stage first")
        return refs[-1]

    def get(self, stage: str, version: str) -> CheckpointRef:
        """A checkpoint by stage and version (a unique version prefix is enough)."""
        matches = [r for r in self.list(stage) if r.version.startswith(version)]
        if len(matches) != 1:
            raise CheckpointNotFound(f"{'no' if not matches else 'several'} {stage} checkpoint(s) matching {version!r} "
                                     f"in {self.root}")
        return matches[0]

    def resolve(self, ident: str) -> CheckpointRef:
        """`stage/version`, `stage` (its latest), or a local checkpoint folder inside this store."""
        path = Path(ident)
        if not self.is_s3 and path.is_dir() and (path / LINEAGE_FILE).exists():
            lineage = json.loads((path / LINEAGE_FILE).read_text())
            return self.get(lineage["checkpoint"]["stage"], lineage["checkpoint"]["version"])
        stage, _, version = ident.strip("/").partition("/")
        if stage not in self.stages():
            raise CheckpointNotFound(f"no checkpoint {ident!r} in {self.root}: not a checkpoint folder, and no stage "
                                     f"{stage!r} there (stages: {', '.join(self.stages()) or 'none yet'})")
        return self.get(stage, version) if version else self.latest(stage)

    def lineage(self, ref: CheckpointRef) -> dict[str, Any]:
        lineage = self._read_lineage(ref.stage, ref.version)
        if lineage is None:
            raise CheckpointNotFound(f"{ref.id} has no lineage.json")
        return lineage

    def all_lineage(self) -> list[dict[str, Any]]:
        return [self.lineage(ref) for stage in self.stages() for ref in self.list(stage)]

    def local_path(self, ref: CheckpointRef) -> Path:
        """A local folder with the checkpoint's files (downloaded into the cache for S3)."""
        if not self.is_s3:
            return Path(ref.uri)
        target = self.cache_dir / ref.stage / ref.version
        if (target / LINEAGE_FILE).exists():
            return target
        bucket, prefix = self._split(ref.uri)
        client = self._s3()
        staging = self.cache_dir / _STAGING / uuid.uuid4().hex
        try:
            for key in self._keys(bucket, prefix + "/"):
                dest = staging / key[len(prefix) + 1:]
                dest.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, key, str(dest))
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    # -- run files: stage configs by reference, resumable training state --------------------

    def run_uri(self, stage: str, key: str, *parts: str) -> str:
        """Where a stage run keeps its config and resumable state: ROOT/.runs/<stage>/<key>/…"""
        return self._uri(RUNS, _checked("stage", stage), _checked("run key", key), *parts)

    def put_text(self, uri: str, text: str) -> str:
        """Write a small text object (a stage config) at a URI under this root; returns the URI."""
        if self.is_s3:
            bucket, key = self._split(uri)
            self._s3().put_object(Bucket=bucket, Key=key, Body=text.encode())
        else:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            Path(uri).write_text(text)
        return uri

    def upload_tree(self, folder: Path, uri: str) -> str:
        """Copy a local folder's files to a URI under this root (S3 or a folder)."""
        files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        if self.is_s3:
            bucket, prefix = self._split(uri)
            for path in files:
                self._s3().upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")
        else:
            for path in files:
                target = Path(uri) / path.relative_to(folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        return uri

    def ensure_tree(self, folder: Path, name: str) -> str:
        """A local folder (the sandbox catalogue) under ROOT/.runs/<name>/<digest>/, uploaded once
        per content (file names, sizes and modification times), a marker written last."""
        digest = hashlib.sha256()
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            stat = path.stat()
            digest.update(f"{path.relative_to(folder).as_posix()}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode())
        uri = self.run_uri(name, digest.hexdigest()[:VERSION_CHARS], "files")
        marker = uri.rsplit("/", 1)[0] + "/COMPLETE"
        if not self.exists(marker):
            self.upload_tree(folder, uri)
            self.put_text(marker, uri)
        return uri

    def remove_tree(self, uri: str) -> None:
        """Delete everything under a URI of this root (superseded resumable state)."""
        if not self.is_s3:
            shutil.rmtree(uri, ignore_errors=True)
            return
        bucket, prefix = self._split(uri)
        for key in self._keys(bucket, prefix + "/"):
            self._s3().delete_object(Bucket=bucket, Key=key)

    def exists(self, uri: str) -> bool:
        if not self.is_s3:
            return Path(uri).exists()
        bucket, key = self._split(uri)
        return any_object(self._s3(), bucket, key)

    def children(self, uri: str) -> list[str]:
        """The sub-folder names directly under a URI of this root."""
        if not self.is_s3:
            return sorted(p.name for p in Path(uri).iterdir() if p.is_dir()) if Path(uri).is_dir() else []
        return self._children(uri[len(self.root):].strip("/"))

    # -- storage plumbing ----------------------------------------------------------------

    def _uri(self, *parts: str) -> str:
        return "/".join([self.root, *parts]) if self.is_s3 else str(Path(self.root, *parts))

    def _split(self, uri: str) -> tuple[str, str]:
        bucket, _, key = uri[len("s3://"):].partition("/")
        return bucket, key.strip("/")

    def _s3(self) -> Any:
        if self._client is None:
            self._client = make_s3_client(endpoint_url=self.endpoint_url)
        return self._client

    def _keys(self, bucket: str, prefix: str) -> list[str]:
        return [obj["Key"] for obj in list_objects(self._s3(), bucket, prefix)]

    def _children(self, sub: str) -> list[str]:
        if not self.is_s3:
            folder = Path(self.root, sub) if sub else Path(self.root)
            return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        bucket, prefix = self._split(self._uri(sub) if sub else self.root)
        return sorted(set(list_prefixes(self._s3(), bucket, f"{prefix}/" if prefix else "")))

    def _read_lineage(self, stage: str, version: str) -> dict[str, Any] | None:
        if not _NAME.match(version):
            return None
        if not self.is_s3:
            path = Path(self.root, stage, version, LINEAGE_FILE)
            return json.loads(path.read_text()) if path.exists() else None
        bucket, prefix = self._split(self._uri(stage, version))
        try:
            body = self._s3().get_object(Bucket=bucket, Key=f"{prefix}/{LINEAGE_FILE}")["Body"].read()
        except self._s3().exceptions.NoSuchKey:
            return None
        return json.loads(body)


def fetch(uri: str, dest: Path, endpoint_url: str | None = None) -> Path:
    """A local copy of `uri`: a local path is returned as it is; an s3:// object is downloaded
    to `dest`, an s3:// prefix (a folder: a checkpoint, a catalogue) into `dest/`. How a pod,
    which shares no folder with the orchestrator, gets its model, catalogue and config."""
    if not uri.startswith("s3://"):
        return Path(uri)
    bucket, key = parse_s3_uri(uri)
    client = make_s3_client(endpoint_url=endpoint_url)
    keys = [o["Key"] for o in list_objects(client, bucket, key + "/")]
    if not keys:  # one object
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            client.download_file(bucket, key, str(dest))
        except Exception as exc:  # botocore's ClientError: say what was missing, in one line
            raise FileNotFoundError(f"{uri}: no such object or folder ({exc})") from None
        return dest
    for name in keys:
        target = dest / name[len(key) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, name, str(target))
    return dest
