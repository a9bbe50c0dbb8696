"""The oro_api source against a stand-in ORO API on loopback (tests/oro_standin.py): every
answer built from oro-sdk's own models, artifacts presigned on moto's S3 server. The day is
landed by the real asset, inventoried by raw_firehose and run through the real corpus."""

from __future__ import annotations

import gzip
import json
from datetime import date
from pathlib import Path

import dagster as dg
import orjson
import pytest
from oro_standin import StandIn, World, conformance_world, world_from_problem_runs

from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from resources.oro_api import OroApiResource
from resources.oro_client import OroApi, RetryPolicy, build_sdk_client
from shopdistill_assets.ingest.oro_day import DAY_FILE, IngestConfig, _race_touches, dialogue_of, land_day, utc_day
from shopdistill_assets.ingest.oro_store import Store

DAY = "2026-11-20"
CORPUS = ["raw_firehose", "normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces"]
FINAL_TABLES = ("gated_traces", "subtask_traces", "rejected_traces")
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@pytest.fixture(scope="module")
def sim_records(tmp_path_factory) -> tuple[list[dict], Path]:
    """30 simulated problem runs of DAY (no shared data needed) and the file they came in."""
    from shopdistill_assets.sim import simulate
    from shopdistill_assets.sim.arena import ArenaConfig

    out = tmp_path_factory.mktemp("arena")
    simulate(ArenaConfig(out=out, start_day=date.fromisoformat(DAY), days=1, traces_per_day=30, n_products=300,
                         problems_per_day=20, corrupt_share=0, reupload_share=0, other_dialect_share=0,
                         truncated_file=False, seed=3))
    path = out / "firehose" / f"day={DAY}" / "part-000.jsonl.gz"
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()], path


@pytest.fixture
def standin(moto_s3):
    started: list[StandIn] = []

    def start(world: World) -> StandIn:
        started.append(StandIn(world, moto_s3).__enter__())
        return started[-1]

    yield start
    for server in started:
        server.__exit__()


def oro(server: StandIn, **settings) -> OroApiResource:
    return OroApiResource(base_url=server.url, timeout_s=10, max_backoff_s=2, **settings)


def materialize(names: list[str], oro_api: OroApiResource, firehose: Path, lake: Path, instance=None):
    from shopdistill_assets.cli.runner import _selected

    return dg.materialize(_selected(names), partition_key=DAY, selection=[dg.AssetKey(n) for n in names],
                          resources={"oro_api": oro_api, "firehose": FirehoseResource(root=str(firehose)),
                                     "lake": LakeResource(root=str(lake))},
                          instance=instance or dg.DagsterInstance.ephemeral(), raise_on_error=False, run_config=QUIET)


def day_lines(firehose: Path) -> list[dict]:
    return [orjson.loads(line) for line in (firehose / f"day={DAY}" / DAY_FILE).read_bytes().splitlines()]


def fates(lake: Path, file_name: str | None = None) -> dict[tuple[str, str, str], tuple[str, str | None]]:
    """(eval_run_id, problem_id, source_line as text) -> (final table, reason) for one day."""
    out = {}
    lake_res = LakeResource(root=str(lake))
    for name in FINAL_TABLES:
        df = lake_res.read_day(name, DAY)
        reasons = df["reason"].to_list() if name == "rejected_traces" else [None] * df.height
        for run, problem, line, reason in zip(df["eval_run_id"].to_list(), df["problem_id"].to_list(),
                                              df["source_line"].to_list(), reasons):
            out[(run, problem, str(line))] = (name, reason)
    return out


def by_run(fate_map: dict) -> dict[tuple[str, str], list[tuple[str, str | None]]]:
    out: dict = {}
    for (run, problem, _), fate in sorted(fate_map.items(), key=lambda kv: int(kv[0][2])):
        out.setdefault((run, problem), []).append(fate)
    return out


# ---- plain functions ----------------------------------------------------------------

def test_a_result_belongs_to_the_utc_day_of_its_updated_at():
    import datetime as dt

    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert utc_day(dt.datetime(2026, 11, 21, 1, 30, tzinfo=plus_two)) == "2026-11-20"
    assert utc_day(dt.datetime(2026, 11, 20, 23, 59, 59)) == "2026-11-20"  # naive: UTC
    assert utc_day(None) is None


def test_artifacts_that_are_not_json_still_make_a_line():
    assert dialogue_of(b"[]") == []
    assert dialogue_of(b'[{"completion": {}}]') == [{"completion": {}}]
    assert dialogue_of(b"\xff not json") == "\ufffd not json"  # the reader rejects it with a reason
    assert dialogue_of(b"[NaN]") == "[NaN]"  # as the corpus would reject the bytes themselves
    big = b"[123456789012345678901234567890]"
    assert dialogue_of(big) == orjson.loads(big)  # read exactly as the corpus reads a line
    assert dialogue_of(None) is None


# ---- the stand-in API, synthetic day (no shared data) ---------------------------------

def test_a_day_lands_through_faults_and_meets_the_direct_corpus(sim_records, standin, tmp_path):
    records, sim_file = sim_records
    # The same records read straight from a folder: the fates the API path must give too.
    direct_root = tmp_path / "direct"
    (direct_root / f"day={DAY}").mkdir(parents=True)
    (direct_root / f"day={DAY}" / sim_file.name).write_bytes(sim_file.read_bytes())
    assert materialize(CORPUS, OroApiResource(), direct_root, tmp_path / "direct_lake").success
    straight = by_run(fates(tmp_path / "direct_lake"))
    gated = sorted(k for k, v in straight.items() if v == [("gated_traces", None)])

    world = world_from_problem_runs(records, DAY)
    first = records[0]
    world.plan("/v1/public/races/history", 429, headers={"Retry-After": "1"})
    problems_path = f"/v1/public/agent-versions/{first['agent_version_id']}/problems"
    world.plan(problems_path, 503)
    world.plan(problems_path, 500)
    world.truncate_once.add(f"{first['eval_run_id']}/{first['problem_id']}")
    # A kept run the judge left unscored, and a kept run turned FAILED with `[]` logs.
    unscored, failed = world.find(*gated[0]), world.find(*gated[1])
    unscored.reasoning_score = None
    failed.status, failed.score, failed.reasoning_score, failed.logs = "FAILED", 0.0, None, b"[]"
    server = standin(world)
    firehose, lake = tmp_path / "firehose", tmp_path / "lake"

    result = materialize(["oro_api_day", *CORPUS], oro(server), firehose, lake)
    assert result.success
    meta = {k: getattr(v, "value", v) for k, v in
            result.asset_materializations_for_node("oro_api_day")[0].metadata.items()}
    assert meta["dagster/row_count"] == meta["results_of_day"] == meta["fetched"] == len(records) == 30
    counts = meta["counts"]
    for counted in ("retry/429 | 1", "retry/503 | 1", "retry/500 | 1", "download/truncated | 1"):
        assert counted in counts, counts
    assert world.calls("GET", "/v1/public/races/history") == 2  # the 429, then the one page of 50

    # (a) the landing zone: every artifact byte for byte with its sha256 and the API entry
    landing = tmp_path / "firehose" / "_oro_landing" / f"day={DAY}" / "runs"
    metas = sorted(landing.rglob("*.meta.json"))
    assert len(metas) == 30
    for path in metas:
        landed = json.loads(path.read_text())
        run = world.find(landed["result"]["eval_run_id"], landed["entry"]["problem_id"])
        stored = (tmp_path / "firehose" / "_oro_landing" / landed["artifact"]["key"]).read_bytes()
        assert stored == run.logs
        assert landed["artifact"]["sha256"] == __import__("hashlib").sha256(run.logs).hexdigest()
        assert landed["agent_version"]["miner_hotkey"] == world.miners[run.agent_version_id]

    # (b) the joined lines: one per problem run, the sim's own record back (bar the race id,
    # which the API spells as a race UUID, and the judge's words, which the entry lacks)
    lines = {(r["eval_run_id"], r["problem_id"]): r for r in day_lines(firehose)}
    assert len(lines) == 30
    changed = {(unscored.eval_run_id, unscored.problem_id), (failed.eval_run_id, failed.problem_id)}
    for rec in records:
        if (rec["eval_run_id"], rec["problem_id"]) in changed:
            continue
        line = lines[(rec["eval_run_id"], rec["problem_id"])]
        for key in ("agent_version_id", "miner_hotkey", "validator_hotkey", "phase", "suite_id", "problem",
                    "score", "inference_total", "inference_failure_count", "execution_time"):
            assert line[key] == rec[key], key
    assert lines[(unscored.eval_run_id, unscored.problem_id)]["reasoning_score"] is None
    assert lines[(failed.eval_run_id, failed.problem_id)]["dialogue"] == []

    # The corpus: every line lands once, with the fate the same record gets read straight from
    # a folder, except the two runs changed above.
    via_api = by_run(fates(lake))
    assert len(via_api) == 30 and sum(len(v) for v in via_api.values()) == 30
    for key, fate in straight.items():
        if key not in changed:
            assert via_api[key] == fate, key
    # Each with its reason (named as on this branch, or as the corpus-rules change names them).
    assert via_api[(failed.eval_run_id, failed.problem_id)] in (
        [("rejected_traces", "empty_dialogue")], [("rejected_traces", "failed_run")])
    assert via_api[(unscored.eval_run_id, unscored.problem_id)] in (
        [("rejected_traces", "reasoning_missing")], [("rejected_traces", "no_reasoning_score")])
    for check in result.get_asset_check_evaluations():
        assert check.passed, check.check_name


def test_a_rerun_fetches_nothing_and_a_rejudged_result_supersedes_the_old(sim_records, standin, tmp_path):
    records, _ = sim_records
    world = world_from_problem_runs(records[:6], DAY)
    server = standin(world)
    api = OroApi(build_sdk_client(server.url, None, 10), RetryPolicy(base_delay_s=0.01))
    landing, firehose = Store(str(tmp_path / "landing")), Store(str(tmp_path / "firehose"))
    cfg = IngestConfig(page_size=2)  # the race history and the leaderboard come in pages of two
    first = land_day(api, landing, firehose, DAY, cfg)
    assert first.counts["artifacts/fetched"] == 6 and first.day_file_written
    assert api.stats.counts["races/listed"] == 4  # the day's race, then older ones until they end too early
    assert world.calls("GET", "/v1/public/leaderboard") == 2  # 3 agent versions off the race, 2 a page
    posts = world.calls("POST", "/v1/public/artifacts/download-url")
    day_file = tmp_path / "firehose" / f"day={DAY}" / DAY_FILE
    mtime = day_file.stat().st_mtime_ns

    again = land_day(api, landing, firehose, DAY, cfg)
    assert again.counts["artifacts/already_landed"] == 6 and again.counts["artifacts/fetched"] == 0
    assert world.calls("POST", "/v1/public/artifacts/download-url") == posts  # nothing fetched
    assert not again.day_file_written and day_file.stat().st_mtime_ns == mtime  # the sensor sees no change

    # Re-judged later the same day: a new version; the old one stays in the day file.
    run = world.runs[0]
    old_updated = run.updated_at
    run.updated_at, run.reasoning_score = f"{DAY}T23:30:00+00:00", 0.3
    rejudged = land_day(api, landing, firehose, DAY, cfg)
    assert rejudged.counts["artifacts/fetched"] == 1 and rejudged.counts["lines"] == 7
    versions = [line for line in day_lines(tmp_path / "firehose") if line["eval_run_id"] == run.eval_run_id
                and line["problem_id"] == run.problem_id]
    assert [v["reasoning_score"] for v in versions] == [records[0]["reasoning_score"], 0.3]
    assert versions[0]["updated_at"][:19] == old_updated[:19]

    # The corpus marks the older version superseded and keeps deciding the newer one.
    lake = tmp_path / "lake"
    result = materialize(CORPUS, oro(server), tmp_path / "firehose", lake)
    assert result.success
    fate = by_run(fates(lake))[(run.eval_run_id, run.problem_id)]
    assert fate[0] == ("rejected_traces", "superseded") and fate[1][1] != "superseded"


def test_an_unreleased_artifact_fails_the_day_cleanly_and_a_retry_completes_it(sim_records, standin, tmp_path):
    records, _ = sim_records
    world = world_from_problem_runs(records[:5], DAY)
    held = world.runs[2]
    world.not_released.add(f"{held.eval_run_id}/{held.problem_id}")
    server = standin(world)
    firehose, lake = tmp_path / "firehose", tmp_path / "lake"
    instance = dg.DagsterInstance.ephemeral()

    failed = materialize(["oro_api_day", *CORPUS], oro(server), firehose, lake, instance)
    assert not failed.success
    assert not failed.get_asset_materialization_events()  # raw_firehose and the corpus did not run
    (failure,) = [e for e in failed.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert "incomplete: 1 of 5 artifacts are not released yet" in message and "\n" not in message
    assert not (firehose / f"day={DAY}").exists()  # never half-written
    assert len(list((firehose / "_oro_landing").rglob("*.meta.json"))) == 4  # the rest is landed

    world.not_released.clear()
    posts = world.calls("POST", "/v1/public/artifacts/download-url")
    done = materialize(["oro_api_day"], oro(server), firehose, lake, instance)
    assert done.success
    assert world.calls("POST", "/v1/public/artifacts/download-url") - posts == 1  # only the missing one
    assert len(day_lines(firehose)) == 5


def test_retry_after_is_honoured_and_5xx_back_off(sim_records, standin):
    records, _ = sim_records
    world = world_from_problem_runs(records[:1], DAY)
    world.plan("/v1/public/leaderboard", 429, headers={"Retry-After": "7"})
    world.plan("/v1/public/leaderboard", 502)
    server = standin(world)
    waits: list[float] = []
    api = OroApi(build_sdk_client(server.url, None, 10), RetryPolicy(base_delay_s=0.25), sleep=waits.append)
    from shopdistill_assets.ingest.oro_day import leaderboard_agent_versions

    assert leaderboard_agent_versions(api, IngestConfig()) == set()  # the one version races
    assert waits[0] == 7.0 and 0 <= waits[1] <= 0.5  # Retry-After, then jittered 0.25 * 2**1
    assert world.calls("GET", "/v1/public/leaderboard") == 3


def test_an_artifact_not_found_still_gives_its_line_and_is_asked_again(sim_records, standin, tmp_path):
    records, _ = sim_records
    world = world_from_problem_runs(records[:3], DAY)
    missing = world.runs[1]
    world.not_found.add(f"{missing.eval_run_id}/{missing.problem_id}")
    server = standin(world)
    api = OroApi(build_sdk_client(server.url, None, 10), RetryPolicy(base_delay_s=0.01))
    landing, firehose = Store(str(tmp_path / "landing")), Store(str(tmp_path / "firehose"))
    report = land_day(api, landing, firehose, DAY, IngestConfig())
    assert report.counts["artifacts/not_found"] == 1 and report.counts["lines"] == 3
    (line,) = [r for r in day_lines(tmp_path / "firehose") if r["eval_run_id"] == missing.eval_run_id]
    assert line["dialogue"] is None and line["status"] == missing.status  # the corpus says why, not us

    world.not_found.clear()
    again = land_day(api, landing, firehose, DAY, IngestConfig())
    assert again.counts["artifacts/fetched"] == 1 and again.counts["artifacts/already_landed"] == 2
    (line,) = [r for r in day_lines(tmp_path / "firehose") if r["eval_run_id"] == missing.eval_run_id]
    assert line["dialogue"] == json.loads(missing.logs)


def test_auth_errors_are_one_line_and_the_key_stays_out_of_everything(sim_records, standin, tmp_path):
    records, _ = sim_records
    world = world_from_problem_runs(records[:3], DAY)
    world.token = "sekrit-oro-token-123"
    server = standin(world)
    firehose, lake = tmp_path / "firehose", tmp_path / "lake"

    refused = materialize(["oro_api_day"], oro(server), firehose, lake)
    (failure,) = [e for e in refused.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert "HTTP 401" in message and "SHOPDISTILL_ORO_API_KEY" in message and "\n" not in message

    result = materialize(["oro_api_day", *CORPUS], oro(server, api_key=world.token), firehose, lake)
    assert result.success
    for path in [*firehose.rglob("*"), *lake.rglob("*")]:
        if path.is_file():
            assert b"sekrit-oro-token" not in path.read_bytes(), path
    for event in result.all_events:
        assert "sekrit-oro-token" not in str(event.event_specific_data), event.event_type_value


def test_retries_give_up_with_a_one_line_error(sim_records, standin, tmp_path):
    records, _ = sim_records
    world = world_from_problem_runs(records[:2], DAY)
    world.plan("/v1/public/leaderboard", 503, times=10)
    server = standin(world)
    result = materialize(["oro_api_day"], oro(server, max_retries=2), tmp_path / "f", tmp_path / "l")
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description == \
        "GET /v1/public/leaderboard?offset=0: HTTP 503 after 3 tries"


def test_an_answer_not_in_the_sdk_shape_is_a_one_line_error(sim_records, standin):
    from resources.oro_client import OroApiError
    from shopdistill_assets.ingest.oro_day import race_agent_versions

    records, _ = sim_records
    world = world_from_problem_runs(records[:1], DAY)
    world.plan("/v1/public/races/history", 200)  # 200 with {"detail": ...}: no `races`
    api = OroApi(build_sdk_client(standin(world).url, None, 10), RetryPolicy(base_delay_s=0.01))
    with pytest.raises(OroApiError, match=r"^GET /v1/public/races/history\?offset=0: the answer is not in "
                                          r"oro-sdk's shape \(KeyError: 'total'\)$"):
        race_agent_versions(api, DAY, IngestConfig())


def test_race_spans_decide_which_races_are_read():
    import datetime as dt

    from oro_sdk.models import RacePublic

    def race(start: str, end: str | None) -> RacePublic:
        return RacePublic(race_id=__import__("uuid").uuid4(), suite_id=3, status="x",
                          created_at=dt.datetime.fromisoformat(start),
                          race_completed_at=dt.datetime.fromisoformat(end) if end else None)

    lo, hi = dt.datetime.fromisoformat("2026-11-20T00:00+00:00"), dt.datetime.fromisoformat("2026-11-21T00:00+00:00")
    assert _race_touches(race("2026-11-19T10:00+00:00", "2026-11-20T03:00+00:00"), lo, hi)
    assert _race_touches(race("2026-11-20T10:00+00:00", None), lo, hi)  # still running
    assert not _race_touches(race("2026-11-17T10:00+00:00", "2026-11-18T03:00+00:00"), lo, hi)
    assert not _race_touches(race("2026-11-21T00:00+00:00", None), lo, hi)


# ---- the conformance pair (../shared) ------------------------------------------------

@pytest.fixture(scope="module")
def conformance_day(shared_dir, tmp_path_factory):
    """The conformance uploads served by the stand-in, landed, and run through the corpus once."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as env:
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(var, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        conformance = shared_dir / "conformance"
        tmp = tmp_path_factory.mktemp("conformance")
        try:
            with StandIn(conformance_world(conformance), f"http://{host}:{port}") as server:
                result = materialize(["oro_api_day", *CORPUS], oro(server), tmp / "firehose", tmp / "lake")
        finally:
            moto.stop()
    assert result.success
    return conformance, tmp / "firehose", tmp / "lake"


def test_the_conformance_uploads_land_as_their_joined_records(conformance_day):
    conformance, firehose, _ = conformance_day
    uploads = (conformance / "records" / "oro_upload.jsonl").read_bytes().split(b"\n")
    metas = [json.loads(line) for line in (conformance / "records" / "oro_upload_api_meta.jsonl").read_text().splitlines()]
    joined = {json.loads(line)["eval_run_id"]: json.loads(line)
              for line in (conformance / "records" / "oro_problem_run.jsonl").read_text().splitlines() if line}
    lines = {line["eval_run_id"]: line for line in day_lines(firehose)}
    assert len(lines) == len(metas) == 4
    for k, meta in enumerate(metas):
        run_id = meta["entry"]["validator_results"][0]["eval_run_id"]
        landed = next((firehose / "_oro_landing").rglob(f"{run_id}/*/*[0-9].json")).read_bytes()
        assert landed == uploads[k]  # byte for byte
        expected = joined[run_id]  # the record conformance/README.md says this join makes
        for key, value in lines[run_id].items():
            if key == "dialogue" and expected["status"] == "FAILED":
                # The envelope of a FAILED run says `null`, its upload `[]`: both are no dialogue.
                assert value == [] and expected[key] is None
            elif key != "race_id":
                assert value == expected[key], (k, key)


@pytest.mark.parametrize("line", [1, 2, 3, 4])
def test_each_conformance_upload_gets_its_expected_fate(conformance_day, line):
    conformance, _, lake = conformance_day
    (want,) = [w for w in map(json.loads, (conformance / "expected.jsonl").read_text().splitlines())
               if w["file"] == "records/oro_upload.jsonl" and w["line"] == line]
    meta = json.loads((conformance / "records" / "oro_upload_api_meta.jsonl").read_text().splitlines()[line - 1])
    key = (meta["entry"]["validator_results"][0]["eval_run_id"], meta["entry"]["problem_id"])
    ((table, reason),) = by_run(fates(lake))[key]
    fate = {"gated_traces": "kept", "subtask_traces": "subtask"}.get(table, "rejected")
    assert (fate, reason if fate == "rejected" else None) == (want["fate"], want["reason"])


def test_cli_ingest_from_the_oro_api(sim_records, standin, tmp_path, capsys, monkeypatch):
    from shopdistill_assets.cli import main as cli_main

    records, _ = sim_records
    server = standin(world_from_problem_runs(records[:8], DAY))
    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path / "home"))
    code = cli_main(["ingest", "--source", "oro-api", "--day", DAY, "--oro-api-url", server.url,
                     "--firehose", str(tmp_path / "firehose"), "--lake", str(tmp_path / "lake")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"{DAY}  oro-api: 8 results of the day, 8 artifacts fetched, 0 already landed, 8 lines" in out.out
    funnel = [line for line in out.out.splitlines() if line.startswith(DAY) and line.endswith("ok")]
    assert len(funnel) == 1 and funnel[0].split()[1] == "8"  # 8 lines read, conservation ok

    # The folder source reads that same firehose day as it is, with the same funnel.
    code = cli_main(["ingest", "--source", "folder", "--day", DAY, "--firehose", str(tmp_path / "firehose"),
                     "--lake", str(tmp_path / "lake2")])
    again = [line for line in capsys.readouterr().out.splitlines() if line.startswith(DAY)]
    assert code == 0 and again == funnel

    # A folder source given as s3 is refused in one line, before any work.
    code = cli_main(["ingest", "--source", "s3", "--day", DAY, "--firehose", str(tmp_path / "firehose")])
    assert code == 1 and "wants a s3:// firehose root" in capsys.readouterr().err


def test_an_s3_firehose_gets_the_day_file_and_the_landing_zone(sim_records, standin, moto_s3, tmp_path):
    import boto3

    from shopdistill_assets.cli.runner import _selected

    records, _ = sim_records
    server = standin(world_from_problem_runs(records[:4], DAY))
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    s3.create_bucket(Bucket="arena")
    firehose = FirehoseResource(root="s3://arena/firehose", endpoint_url=moto_s3)
    names = ["oro_api_day", "raw_firehose"]
    resources = {"oro_api": oro(server), "firehose": firehose, "lake": LakeResource(root=str(tmp_path / "lake"))}
    for _ in range(2):  # the second run finds everything landed
        result = dg.materialize(_selected(names), partition_key=DAY, selection=[dg.AssetKey(n) for n in names],
                                resources=resources, instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
        assert result.success
    landed = result.asset_materializations_for_node("oro_api_day")[0].metadata
    assert landed["already_landed"].value == 4 and landed["day_file_written"].value is False
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="arena")["Contents"])
    assert f"firehose/day={DAY}/{DAY_FILE}" in keys
    assert sum(k.startswith(f"firehose/_oro_landing/day={DAY}/runs/") and k.endswith(".meta.json") for k in keys) == 4
    inventory = LakeResource(root=str(tmp_path / "lake")).read_day("raw_firehose", DAY)
    assert inventory["file"].to_list() == [DAY_FILE]  # the landing zone is never a day file


def test_the_source_is_registered_with_its_job_and_a_stopped_sensor():
    from shopdistill_assets.definitions import defs

    graph = defs.get_repository_def().asset_graph
    assert dg.AssetKey("oro_api_day") in graph.get(dg.AssetKey("raw_firehose")).parent_keys
    assert defs.resolve_job_def("oro_api_daily") is not None
    sensor = defs.resolve_sensor_def("oro_api_day_sensor")
    assert sensor.job_name == "oro_api_daily" and sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert defs.resolve_job_def("corpus_daily").asset_layer.executable_asset_keys.isdisjoint(
        {dg.AssetKey("oro_api_day")})  # folder and S3 days never call the API


def test_the_sensors_pick_the_day_up(sim_records, standin, tmp_path):
    import datetime as dt

    from jobs.firehose_days import scan_days
    from shopdistill_assets.ingest.oro_assets import RECHECK_DAYS, oro_api_day_sensor

    records, _ = sim_records
    server = standin(world_from_problem_runs(records[:3], DAY))
    firehose = FirehoseResource(root=str(tmp_path / "firehose"))
    assert materialize(["oro_api_day"], oro(server), tmp_path / "firehose", tmp_path / "lake").success
    # The firehose sensor sees the day the asset wrote, and only that (not the landing zone).
    assert list(scan_days(firehose)) == [DAY]

    context = dg.build_sensor_context(resources={"oro_api": oro(server), "firehose": firehose})
    requests = oro_api_day_sensor(context).run_requests
    today = dt.datetime.now(dt.timezone.utc).date()
    assert [r.partition_key for r in requests] == [(today - dt.timedelta(days=n)).isoformat()
                                                   for n in range(1, RECHECK_DAYS + 1)]
    assert len({r.run_key for r in requests}) == RECHECK_DAYS  # one run per day per hour
