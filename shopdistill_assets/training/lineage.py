"""Lineage: which corpus, days and firehose files made a checkpoint, and the reverse.

Every checkpoint's `lineage.json` (schema `shopdistill.lineage/v1`) names:
  stage, checkpoint {stage, version, sha256, uri}   (added by the store on publish)
  parent       the checkpoint it started from {stage, version, sha256, uri} or {base_model}
  dataset      the snapshot it trained on {asset, version, content_sha256, manifest_sha256, rows}
  corpus       the train_corpus snapshot behind the chain {version, content_sha256, manifest_sha256}
  days, firehose_files   the days and the files (name + sha256) behind its dataset and corpus
  hyperparameters, deepspeed, libraries, code {commit, dirty, package_version}, training {…}
Snapshot manifests in the lake carry the same `days` / `firehose_files` keys, so one DuckDB
query over manifests and lineage files answers "what did day D feed".
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

SCHEMA = "shopdistill.lineage/v1"
LIBRARIES = ("torch", "transformers", "trl", "accelerate", "deepspeed", "datasets", "peft", "shopdistill")
_REPO = Path(__file__).resolve().parents[2]


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def code_version() -> dict[str, Any]:
    """The git commit of the code (and whether the tree had changes), where a checkout exists."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD") or os.environ.get("SHOPDISTILL_CODE_COMMIT")  # images carry no .git
    dirty = git("status", "--porcelain", "--untracked-files=no")
    try:
        package = metadata.version("shopdistill")
    except metadata.PackageNotFoundError:
        package = None
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None, "package_version": package}


def snapshot_ref(asset: str, version: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """What lineage records of a lake snapshot: its version, content hash and manifest hash."""
    text = json.dumps(manifest, sort_keys=True, default=str).encode()
    import hashlib

    return {"asset": asset, "version": version, "content_sha256": manifest.get("content_sha256"),
            "manifest_sha256": hashlib.sha256(text).hexdigest(), "rows": manifest.get("rows")}


def merge_files(*inventories: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
    """Union of {day: [{file, sha256}]} inventories, sorted."""
    out: dict[str, dict[str, str]] = {}
    for inventory in inventories:
        for day, files in (inventory or {}).items():
            out.setdefault(day, {}).update({f["file"]: f["sha256"] for f in files})
    return {day: [{"file": f, "sha256": s} for f, s in sorted(files.items())] for day, files in sorted(out.items())}


def build_lineage(stage: str, *, parent: dict[str, Any], dataset: dict[str, Any], corpus: dict[str, Any] | None,
                  days: list[str], firehose_files: dict[str, list[dict[str, str]]], hyperparameters: dict[str, Any],
                  deepspeed: dict[str, Any] | None, leak_clusters_day: str | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "stage": stage, "created_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        "parent": parent, "dataset": dataset, "corpus": corpus, "days": sorted(days),
        "firehose_files": firehose_files, "leak_clusters_day": leak_clusters_day,
        "hyperparameters": hyperparameters, "deepspeed": deepspeed, "libraries": library_versions(),
        "code": code_version(),
    }


def model_card(lineage: dict[str, Any]) -> str:
    """A short README for the checkpoint folder, from its lineage."""
    ck, parent, corpus, data = lineage["checkpoint"], lineage["parent"], lineage.get("corpus") or {}, lineage["dataset"]
    training = lineage.get("training", {})
    files = sum(len(v) for v in lineage.get("firehose_files", {}).values())
    parent_text = (f"`{parent['stage']}/{parent['version']}`" if parent.get("stage")
                   else f"base model `{parent.get('base_model')}`")
    lines = [
        f"# shopdistill {ck['stage']} checkpoint `{ck['version']}`", "",
        f"- stage: **{ck['stage']}**; content sha256 `{ck['sha256']}`",
        f"- started from {parent_text}",
        f"- trained on `{data.get('asset')}` `{data.get('version')}` ({data.get('rows')} rows)",
        f"- corpus: `train_corpus` `{corpus.get('version')}`" if corpus else "- corpus: none",
        f"- days: {', '.join(lineage.get('days', [])) or 'none'} ({files} firehose files, see lineage.json)",
        f"- trained: {training.get('trained', True)}"
        + (f" ({training['reason']})" if training.get("reason") else ""),
    ]
    if training.get("steps") is not None:
        lines.append(f"- steps {training['steps']}, final loss {training.get('final_loss')}, "
                     f"{training.get('tokens_per_s')} tokens/s, {training.get('wall_s')} s")
    lines += ["", "Training data comes only from train-side problems of the leak-guarded split; "
              "`shopdistill lineage` prints the whole chain.", ""]
    return "\n".join(lines)


# -- queries: DuckDB over lineage files and snapshot manifests ---------------------------------

def _lineage_table(lineages: list[dict[str, Any]]):
    import pyarrow as pa

    return pa.table({
        "stage": [l["checkpoint"]["stage"] for l in lineages],
        "version": [l["checkpoint"]["version"] for l in lineages],
        "sha256": [l["checkpoint"]["sha256"] for l in lineages],
        "created_at": [l.get("created_at") for l in lineages],
        "parent_stage": [l["parent"].get("stage") for l in lineages],
        "parent_version": [l["parent"].get("version") for l in lineages],
        "base_model": [l["parent"].get("base_model") for l in lineages],
        "dataset_asset": [l["dataset"].get("asset") for l in lineages],
        "dataset_version": [l["dataset"].get("version") for l in lineages],
        "corpus_version": [(l.get("corpus") or {}).get("version") for l in lineages],
        "days": [list(l.get("days", [])) for l in lineages],
        "trained": [bool(l.get("training", {}).get("trained", True)) for l in lineages],
    }, schema=pa.schema([("stage", pa.string()), ("version", pa.string()), ("sha256", pa.string()),
                         ("created_at", pa.string()), ("parent_stage", pa.string()), ("parent_version", pa.string()),
                         ("base_model", pa.string()), ("dataset_asset", pa.string()), ("dataset_version", pa.string()),
                         ("corpus_version", pa.string()), ("days", pa.list_(pa.string())), ("trained", pa.bool_())]))


def _manifest_table(manifests: list[dict[str, Any]]):
    import pyarrow as pa

    return pa.table({
        "asset": [m.get("asset") for m in manifests], "version": [m.get("version") for m in manifests],
        "rows": [m.get("rows") for m in manifests], "days": [list(m.get("days") or []) for m in manifests],
    }, schema=pa.schema([("asset", pa.string()), ("version", pa.string()), ("rows", pa.int64()),
                         ("days", pa.list_(pa.string()))]))


def chain(lineages: list[dict[str, Any]], stage: str, version: str) -> list[dict[str, Any]]:
    """The checkpoint and its ancestors, newest first, by a recursive DuckDB query."""
    import duckdb

    con = duckdb.connect()
    con.register("checkpoints", _lineage_table(lineages))
    rows = con.execute("""
        WITH RECURSIVE up(stage, version, depth) AS (
            SELECT stage, version, 0 FROM checkpoints WHERE stage = ? AND version = ?
            UNION ALL
            SELECT c.parent_stage, c.parent_version, up.depth + 1
            FROM up JOIN checkpoints c ON c.stage = up.stage AND c.version = up.version
            WHERE c.parent_stage IS NOT NULL AND up.depth < 64)
        SELECT DISTINCT up.depth, up.stage, up.version FROM up ORDER BY up.depth""", [stage, version]).fetchall()
    by_key = {(l["checkpoint"]["stage"], l["checkpoint"]["version"]): l for l in lineages}
    return [by_key[(s, v)] for _, s, v in rows if (s, v) in by_key]


def uses_of_day(lineages: list[dict[str, Any]], manifests: list[dict[str, Any]], day: str) -> dict[str, list[dict]]:
    """Every snapshot (corpus, training datasets) and checkpoint whose data included `day`,
    directly or through an ancestor."""
    import duckdb

    con = duckdb.connect()
    con.register("checkpoints", _lineage_table(lineages))
    con.register("snapshots", _manifest_table(manifests))
    snapshots = con.execute("SELECT asset, version, rows FROM snapshots WHERE list_contains(days, ?) "
                            "ORDER BY asset, version", [day]).fetchall()
    checkpoints = con.execute("""
        WITH RECURSIVE used(stage, version) AS (
            SELECT stage, version FROM checkpoints WHERE list_contains(days, ?)
            UNION
            SELECT c.stage, c.version FROM checkpoints c
            JOIN used u ON c.parent_stage = u.stage AND c.parent_version = u.version)
        SELECT c.stage, c.version, c.created_at, c.corpus_version, list_contains(c.days, ?) AS direct
        FROM checkpoints c JOIN used USING (stage, version)
        ORDER BY c.created_at, c.stage""", [day, day]).fetchall()
    return {"snapshots": [{"asset": a, "version": v, "rows": r} for a, v, r in snapshots],
            "checkpoints": [{"stage": s, "version": v, "created_at": c, "corpus_version": cv, "direct": d}
                            for s, v, c, cv, d in checkpoints]}
