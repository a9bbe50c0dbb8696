"""Automation: the firehose sensor (local folder and S3 on moto's server), the schedule, the
conditions that make the split and snapshots follow the corpus, and a backfill through the
instance that gives the in-order split."""

from __future__ import annotations

import gzip
import json
import logging
import os
import time
from datetime import date, datetime, timezone
from pathlib import Path

import boto3
import dagster as dg
import pytest

from jobs.schedules import corpus_daily_schedule
from jobs.sensors import firehose_day_sensor
from resources.checkpoints import CheckpointStoreResource
from resources.firehose import FirehoseResource
from resources.launcher import TrainingLauncher
from resources.oro_api import OroApiResource
from resources.lake import LakeResource

REPO = Path(__file__).resolve().parents[1]


def tick(firehose: FirehoseResource, cursor: str | None, instance: dg.DagsterInstance | None = None):
    """One sensor evaluation, as the daemon runs it: (partition keys requested, run keys, new cursor)."""
    instance = instance or dg.DagsterInstance.ephemeral()
    with dg.build_sensor_context(cursor=cursor, resources={"firehose": firehose}, instance=instance) as context:
        result = firehose_day_sensor(context)
    return [r.partition_key for r in result.run_requests], [r.run_key for r in result.run_requests], result.cursor


def day_file(lines: int = 2) -> bytes:
    return gzip.compress(b"".join(b'{"n": %d}\n' % i for i in range(lines)), mtime=0)


class LocalFirehose:
    def __init__(self, root: Path):
        self.root, self.resource = root, FirehoseResource(root=str(root))

    def put(self, day: str, name: str, data: bytes) -> None:
        path = self.root / f"day={day}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(time.time_ns(), time.time_ns()))


class S3Firehose:
    def __init__(self, endpoint: str):
        self.client = boto3.client("s3", endpoint_url=endpoint)
        self.client.create_bucket(Bucket="arena")
        self.resource = FirehoseResource(root="s3://arena/firehose", endpoint_url=endpoint)

    def put(self, day: str, name: str, data: bytes) -> None:
        self.client.put_object(Bucket="arena", Key=f"firehose/day={day}/{name}", Body=data)


@pytest.fixture(params=["local", "s3"])
def firehose(request, tmp_path):
    if request.param == "local":
        return LocalFirehose(tmp_path / "firehose")
    return S3Firehose(request.getfixturevalue("moto_s3"))


def test_the_sensor_fires_once_per_new_day_and_again_for_late_or_reuploaded_files(firehose):
    today = datetime.now(timezone.utc).date().isoformat()
    firehose.put("2026-11-02", "part-000.jsonl.gz", day_file())
    firehose.put("2026-11-03", "part-000.jsonl.gz", day_file())
    firehose.put(today, "part-000.jsonl.gz", day_file())  # still filling: not a partition yet
    firehose.put("2026-10-01", "part-000.jsonl.gz", day_file())  # before the start date

    days, run_keys, cursor = tick(firehose.resource, None)
    assert days == ["2026-11-02", "2026-11-03"]
    assert len(set(run_keys)) == 2
    assert tick(firehose.resource, cursor)[0] == []  # nothing new: nothing requested

    firehose.put("2026-11-04", "part-000.jsonl.gz", day_file())
    firehose.put("2026-11-03", ".part-001.jsonl.gz.uploading", b"partial")  # hidden: an upload in progress
    days, _, cursor = tick(firehose.resource, cursor)
    assert days == ["2026-11-04"]

    firehose.put("2026-11-02", "part-001-late.jsonl.gz", day_file())  # a late file
    days, late_keys, cursor = tick(firehose.resource, cursor)
    assert days == ["2026-11-02"] and late_keys[0] not in run_keys

    firehose.put("2026-11-03", "part-000.jsonl.gz", day_file(lines=3))  # re-uploaded with other bytes
    days, _, cursor = tick(firehose.resource, cursor)
    assert days == ["2026-11-03"]
    assert tick(firehose.resource, cursor)[0] == []
    assert set(json.loads(cursor)) == {"2026-11-02", "2026-11-03", "2026-11-04"}


def test_the_first_tick_after_the_demo_does_not_rerun_days_already_ingested(firehose):
    """`make dev` after `make demo`: the demo's days were ingested after their files were written,
    so the sensor's first tick takes them as seen; a day re-uploaded since then runs again."""
    with dg.DagsterInstance.ephemeral() as instance:
        for day in ("2026-11-02", "2026-11-03", "2026-11-04"):
            firehose.put(day, "part-000.jsonl.gz", day_file())
        time.sleep(1.1)  # past S3's whole-second LastModified
        for day in ("2026-11-02", "2026-11-03"):  # the demo ingested these two
            instance.report_runless_asset_event(dg.AssetMaterialization("raw_firehose", partition=day))
        time.sleep(0.05)
        firehose.put("2026-11-03", "part-000.jsonl.gz", day_file(lines=3))  # re-uploaded after the demo
        days, _, cursor = tick(firehose.resource, None, instance)
        assert days == ["2026-11-03", "2026-11-04"]
        assert set(json.loads(cursor)) == {"2026-11-02", "2026-11-03", "2026-11-04"}
        assert tick(firehose.resource, cursor, instance)[0] == []


def test_the_schedule_skips_a_day_that_has_not_arrived(tmp_path):
    firehose = LocalFirehose(tmp_path / "firehose")
    at = datetime(2026, 11, 5, 2, 0, tzinfo=timezone.utc)
    with dg.build_schedule_context(scheduled_execution_time=at, resources={"firehose": firehose.resource}) as ctx:
        skipped = corpus_daily_schedule(ctx)
    assert isinstance(skipped, dg.SkipReason) and "2026-11-04 has not arrived" in skipped.skip_message
    firehose.put("2026-11-04", "part-000.jsonl.gz", day_file())
    with dg.build_schedule_context(scheduled_execution_time=at, resources={"firehose": firehose.resource}) as ctx:
        request = corpus_daily_schedule(ctx)
    assert request.partition_key == "2026-11-04"


# ---- the split and snapshots follow the corpus; a backfill gives the in-order split ----------

DAYS = ["2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06"]
DAILY = ["raw_firehose", "normalized_traces", "agentic_traces", "subtask_traces", "gated_traces",
         "rejected_traces", "leak_clusters", "split_traces"]


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Path:
    from shopdistill_assets.sim import ArenaConfig, simulate

    root = tmp_path_factory.mktemp("arena")
    simulate(ArenaConfig(out=root, start_day=date.fromisoformat(DAYS[0]), days=len(DAYS), traces_per_day=24,
                         seed=5, n_products=300, problems_per_day=15))
    return root


@pytest.fixture(scope="module")
def in_order(arena, tmp_path_factory) -> LakeResource:
    """The reference: every day processed in order, in this process."""
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS

    lake = LakeResource(root=str(tmp_path_factory.mktemp("in-order-lake")))
    resources = {"firehose": FirehoseResource(root=str(arena / "firehose")), "lake": lake,
                 # the training assets are in ASSETS too (not run here)
                 "checkpoints": CheckpointStoreResource(root=str(tmp_path_factory.mktemp("checkpoints"))),
                 "launcher": TrainingLauncher(), "oro_api": OroApiResource()}  # oro_api_day: not run here
    instance = dg.DagsterInstance.ephemeral()
    for day in DAYS:
        result = dg.materialize([*ASSETS, *ASSET_CHECKS], partition_key=day, resources=resources, instance=instance,
                                selection=DAILY)
        assert result.success, day
    return lake


def requested(result, key: str) -> set:
    return set(result.get_requested_partitions(dg.AssetKey(key)))


def assert_row_counts_match_the_lake(instance, lake: LakeResource) -> None:
    """Issue 21 item 4: `dagster/row_count` of every asset outside the corpus step is the number
    of rows its table holds (the corpus step's five tables are checked in tests/test_corpus.py)."""
    def latest(asset: str, day: str | None = None):
        records = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(asset), asset_partitions=[day] if day else None), limit=1).records
        meta = records[0].asset_materialization.metadata
        return {k: getattr(v, "value", v) for k, v in meta.items()}

    for asset in ("raw_firehose", "leak_clusters", "split_traces"):
        for day in lake.list_days(asset):
            assert latest(asset, day)["dagster/row_count"] == lake.read_day(asset, day).height, (asset, day)
    for asset in ("train_corpus", "heldout_eval_set", "corpus_funnel"):
        meta = latest(asset)
        assert meta["dagster/row_count"] == lake.read_snapshot(asset, meta["version"]).height, asset


def test_the_split_and_snapshots_follow_the_corpus(arena, tmp_path, monkeypatch):
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS, build_definitions

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path / "home"))
    defs = build_definitions(firehose_root=str(arena / "firehose"), lake_root=str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()

    (arena / "home").mkdir(exist_ok=True)
    monkeypatch.setenv("SHOPDISTILL_SUITES", str(arena / "suites"))

    def run(keys: list[str], day: str | None) -> None:
        result = dg.materialize([*ASSETS, *ASSET_CHECKS], partition_key=day, resources=defs.resources,
                                instance=instance, selection=keys)
        assert result.success

    corpus = DAILY[:6]
    for day in DAYS[:2]:
        run(corpus, day)
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    # Both days' own inputs exist: their leak clusters, and the split that follows them in the
    # same run; the snapshots wait for a split day.
    assert requested(first, "leak_clusters") == set(DAYS[:2]) == requested(first, "split_traces")
    assert requested(first, "train_corpus") == set() and requested(first, "heldout_eval_set") == set()
    for day in DAYS[:2]:
        run(["leak_clusters", "split_traces"], day)
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert requested(second, "leak_clusters") == set() == requested(second, "split_traces")  # handled
    assert requested(second, "train_corpus") == {None} == requested(second, "heldout_eval_set")
    assert requested(first, "corpus_funnel") == {None}
    run(["train_corpus", "heldout_eval_set", "corpus_funnel"], None)
    assert_row_counts_match_the_lake(instance, LakeResource(root=str(tmp_path / "lake")))
    third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
    assert third.total_requested == 0

    run(corpus, DAYS[0])  # a re-uploaded first day: its split runs again, then the next day's
    fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
    assert requested(fourth, "leak_clusters") == {DAYS[0]}
    assert requested(fourth, "train_corpus") == set()  # not while the split is behind
    run(["leak_clusters", "split_traces"], DAYS[0])
    fifth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=fourth.cursor)
    assert requested(fifth, "leak_clusters") == {DAYS[1]}


def test_a_missing_snapshot_whose_run_failed_waits_for_new_input(arena, tmp_path, monkeypatch):
    """heldout_eval_set with no suites to read: its run fails; the next ticks do not request it
    again (each would be another failed run, one a minute), until an input updates."""
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS, build_definitions

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHOPDISTILL_SUITES", str(tmp_path / "no-suites"))
    defs = build_definitions(firehose_root=str(arena / "firehose"), lake_root=str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()

    def run(keys: list[str], day: str | None) -> bool:
        return dg.materialize([*ASSETS, *ASSET_CHECKS], partition_key=day, resources=defs.resources, instance=instance,
                              selection=keys, raise_on_error=False).success

    day = DAYS[0]
    assert run([*DAILY[:6], "leak_clusters", "split_traces"], day)
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert requested(first, "heldout_eval_set") == {None}
    assert not run(["heldout_eval_set"], None)  # no held-out set at no-suites
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
    assert requested(second, "heldout_eval_set") == set() == requested(third, "heldout_eval_set")
    assert run(["leak_clusters", "split_traces"], day)  # new input: tried again
    fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
    assert requested(fourth, "heldout_eval_set") == {None}


def test_a_five_day_backfill_through_the_instance_gives_the_in_order_split(arena, in_order, tmp_path, monkeypatch):
    """A Dagster asset backfill of the daily chain over 5 days, driven by the backfill daemon's own
    iteration, runs launched in subprocesses by the instance's run launcher; leak_clusters of
    each day equals the in-order reference."""
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.backfill import execute_backfill_iteration

    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    # Runs launched at once (the default queue needs the daemon's dequeue loop as well).
    (dagster_home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n")
    lake = LakeResource(root=str(tmp_path / "lake"))
    for name, value in {"DAGSTER_HOME": dagster_home, "SHOPDISTILL_HOME": tmp_path / "home",
                        "SHOPDISTILL_FIREHOSE": arena / "firehose", "SHOPDISTILL_LAKE": lake.root}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("SHOPDISTILL_S3_ENDPOINT_URL", raising=False)

    with dg.DagsterInstance.get() as instance, WorkspaceProcessContext(
        instance, ModuleTarget(module_name="shopdistill_assets.definitions", attribute=None,
                               working_directory=str(REPO), location_name="shopdistill")) as context:
        graph = context.create_request_context().asset_graph
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id="fivedays", asset_graph=graph, partition_names=DAYS,
            asset_selection=[dg.AssetKey(k) for k in DAILY], backfill_timestamp=time.time(), tags={},
            dynamic_partitions_store=instance, all_partitions=False, title=None, description=None, run_config=None)
        instance.add_backfill(backfill)
        logger = logging.getLogger("backfill-test")
        deadline = time.monotonic() + 420
        while instance.get_backfill("fivedays").status == BulkActionStatus.REQUESTED:
            assert time.monotonic() < deadline, "backfill did not finish"
            list(execute_backfill_iteration(context, logger))
            while any(not r.is_finished for r in instance.get_runs()):
                assert time.monotonic() < deadline, [r.status for r in instance.get_runs()]
                time.sleep(0.5)
        status = instance.get_backfill("fivedays").status
        runs = instance.get_runs()
        failed = [r.run_id for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
        assert status == BulkActionStatus.COMPLETED_SUCCESS and not failed, (status, failed)

    for day in DAYS:
        got = lake.read_day("leak_clusters", day).sort("problem_id")
        want = in_order.read_day("leak_clusters", day).sort("problem_id")
        assert got.equals(want), day
        assert lake.read_day("split_traces", day).height == in_order.read_day("split_traces", day).height
    # the leak_clusters chain took one run for the five days (its single-run backfill policy), not one a day
    chain = [r for r in runs if dg.AssetKey("leak_clusters") in (r.asset_selection or set())]
    assert [(r.tags.get("dagster/asset_partition_range_start"), r.tags.get("dagster/asset_partition_range_end"))
            for r in chain] == [(DAYS[0], DAYS[-1])], [r.tags for r in chain]
    assert len(runs) >= len(DAYS)
