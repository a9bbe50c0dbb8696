"""`shopdistill sql` over a lake (local and S3 on moto's server), the README's example queries,
and the zero-filled reason counts of the stage funnels."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pyarrow as pa
import pytest

from resources.lake import LakeResource
from shopdistill_assets.corpus.funnel import funnel_metadata
from shopdistill_assets.corpus.lake_sql import connect
from shopdistill_assets.corpus.reasons import REASONS

README = Path(__file__).resolve().parents[1] / "README.md"
CLI = str(Path(sys.executable).with_name("shopdistill"))


def fill(lake: LakeResource) -> None:
    for day, reasons in (("2026-11-02", ["json_decode", "superseded", "superseded"]), ("2026-11-03", ["too_long"])):
        lake.write_day("rejected_traces", day, pa.table({
            "trace_id": [f"t{i}" for i in range(len(reasons))], "miner_hotkey": ["5Fminer"] * len(reasons),
            "problem_id": ["p"] * len(reasons), "day": [day] * len(reasons),
            "stage": ["read" if r == "json_decode" else "x" for r in reasons], "reason": reasons}))
        lake.write_day("gated_traces", day, pa.table({"trace_id": ["g1", "g2"], "miner_hotkey": ["5Fminer", "5Fother"],
                                                      "day": [day, day]}))
        lake.write_day("subtask_traces", day, pa.table({"trace_id": ["s1"], "miner_hotkey": ["5Fother"], "day": [day]}))
    lake.write_snapshot("train_corpus", "v20261103-abc", pa.table({"trace_id": ["g1"]}), {"days": 2})


def readme_queries() -> list[str]:
    text = README.read_text()
    return re.findall(r'^shopdistill sql "(SELECT[^"]+)"', text, re.M)


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path):
    if request.param == "local":
        lake = LakeResource(root=str(tmp_path / "lake"))
    else:
        endpoint = request.getfixturevalue("moto_s3")
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="lake")
        lake = LakeResource(root="s3://lake/prod", endpoint_url=endpoint)
    fill(lake)
    return lake


def test_a_view_per_table_over_the_current_parts(lake):
    con, tables = connect(lake)
    assert tables == {"gated_traces": 2, "rejected_traces": 2, "subtask_traces": 2, "train_corpus": 1}
    rows = con.sql("SELECT lake_day, reason, count(*) FROM rejected_traces GROUP BY ALL ORDER BY ALL").fetchall()
    assert rows == [("2026-11-02", "json_decode", 1), ("2026-11-02", "superseded", 2), ("2026-11-03", "too_long", 1)]
    assert con.sql("SELECT lake_version, count(*) FROM train_corpus GROUP BY 1").fetchall() == [("v20261103-abc", 1)]


def test_the_readme_queries_run_through_the_cli(lake, tmp_path):
    queries = readme_queries()
    assert len(queries) >= 3
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home"), "SHOPDISTILL_LAKE": lake.root}
    if lake.endpoint_url:
        env["SHOPDISTILL_S3_ENDPOINT_URL"] = lake.endpoint_url
    for query in queries:
        proc = subprocess.run([CLI, "sql", "--format", "csv", query], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, (query, proc.stderr)
        assert len(proc.stdout.strip().splitlines()) >= 2, (query, proc.stdout)  # a header and rows
    by_miner = subprocess.run([CLI, "sql", "--format", "csv", queries[0]], env=env, capture_output=True, text=True,
                              timeout=120).stdout
    assert "5Fminer,superseded,2" in by_miner


def test_every_reason_code_is_zero_filled():
    meta = funnel_metadata(5, 3, {("read", "json_decode"): 1, ("x", "new_code"): 1})
    counts = {k[len("rejected/"):]: v for k, v in meta.items() if k.startswith("rejected/")}
    assert set(REASONS) <= set(counts) and counts["json_decode"] == 1 and counts["new_code"] == 1
    assert sum(counts.values()) == meta["rejected"] == 2
    assert sum(v == 0 for v in counts.values()) == len(REASONS) - 1
