"""Conformance: records made by ORO's and ShoppingBench's own code get the fate a faithful pipeline gives.

`../shared/conformance/records/` holds the firehose lines (ORO problem runs, the sandbox's
output.jsonl envelopes, the bare per-problem uploads, ShoppingBench rollouts) and
`expected.jsonl` the fate of each (kept / subtask / rejected with a reason). The four files are
put in one folder day and run through the real path: `raw_firehose`, the corpus step and its
blocking conservation check. `oro_upload_api_meta.jsonl` is the uploads' join metadata, not a
firehose record: it is not fed (the oro_api source lands the joined records).
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.ingest.assets import raw_firehose

DAY = "2026-11-20"  # the build day of the fixtures (their updated_at)
FIREHOSE_FILES = ("oro_problem_run.jsonl", "oro_sandbox_output.jsonl", "oro_upload.jsonl", "sb_rollout.jsonl")
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
TABLE_OF_FATE = {"kept": "gated_traces", "subtask": "subtask_traces", "rejected": "rejected_traces"}


def _expected() -> list[dict]:
    path = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "expected.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


EXPECTED = _expected()


@pytest.fixture(scope="module")
def conformance_day(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The four firehose files as one folder day, materialized: (result, {(file, line): (table, reason)})."""
    records = shared_dir / "conformance" / "records"
    if not records.is_dir():
        pytest.skip("../shared/conformance is not present")
    root = tmp_path_factory.mktemp("conformance")
    folder = root / "firehose" / f"day={DAY}"
    folder.mkdir(parents=True)
    for name in FIREHOSE_FILES:
        (folder / name).write_bytes((records / name).read_bytes())
    lake = LakeResource(root=str(root / "lake"))
    result = dg.materialize(
        [raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=DAY,
        resources={"firehose": FirehoseResource(root=str(root / "firehose")), "lake": lake},
        instance=dg.DagsterInstance.ephemeral(), run_config=QUIET,
    )
    fates: dict[tuple[str, int], list[tuple[str, str | None]]] = {}
    for table in TABLE_OF_FATE.values():
        df = lake.read_day(table, DAY)
        reasons = df["reason"].to_list() if table == "rejected_traces" else [None] * df.height
        for name, line, reason in zip(df["source_file"].to_list(), df["source_line"].to_list(), reasons):
            fates.setdefault((name, line), []).append((table, reason))
    return result, fates


def test_every_line_lands_once_and_conservation_holds(conformance_day):
    result, fates = conformance_day
    checks = [e for e in result.get_asset_check_evaluations() if e.check_name == "conservation"]
    assert checks and all(e.passed for e in checks)
    assert len(fates) == len(EXPECTED) == 44
    assert all(len(v) == 1 for v in fates.values())


@pytest.mark.parametrize("case", EXPECTED, ids=[f"{Path(e['file']).stem}:{e['line']}" for e in EXPECTED])
def test_record_gets_its_expected_fate(conformance_day, case):
    _, fates = conformance_day
    got = fates[(Path(case["file"]).name, case["line"])]
    want = [(TABLE_OF_FATE[case["fate"]], case["reason"] if case["fate"] == "rejected" else None)]
    assert got == want, f"{case['mismatch']}: {case['note']}"
