"""The split assets: leak clusters over days, the guarded split, train and held-out snapshots.

One simulated arena (4 days x ~300 traces) is materialized once, a day per run, on an ephemeral
Dagster instance; the other tests build small hand-made firehoses from its records. Figures
(split rate, over-merge rate on the simulator's latent problems) are printed: run with `-s`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from shopdistill_assets.core.canonical import canonical_tokens, text_key
from shopdistill_assets.corpus.assets import CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.ingest.assets import raw_firehose
from shopdistill_assets.sandbox import Problem, load_catalog, load_suite, score_recommendation, write_suite
from shopdistill_assets.sim import ArenaConfig, simulate
from shopdistill_assets.split.assets import (
    heldout_eval_set,
    largest_cluster_share,
    leak_clusters,
    one_side_per_cluster,
    split_traces,
    train_corpus,
)
from shopdistill_assets.split.heldout import load_problems
from shopdistill_assets.split.leak_clusters import LeakConfig, LeakIndex, ProblemRef, jaccard

START = date(2026, 11, 2)
DAYS = [(START + timedelta(days=d)).isoformat() for d in range(4)]
PRIMARY = "sn15.problem_run/v1"
LEAK_TABLES = ("leak_clusters", "leak_state", "leak_merge_log")
CORPUS = [raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS]
LEAK = [leak_clusters, one_side_per_cluster, largest_cluster_share]
SPLIT = [*LEAK, split_traces]
REUPLOAD_MARK = 4242.5  # execution_time of the later copy of a re-uploaded trace


# ---------------------------------------------------------------- helpers


def run(assets: list, resources: dict, day: str | None = None, ops: dict | None = None,
        instance: dg.DagsterInstance | None = None) -> dg.ExecuteInProcessResult:
    config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if ops:
        config["ops"] = {name: {"config": cfg} for name, cfg in ops.items()}
    return dg.materialize(assets, partition_key=day, resources=resources, instance=instance, run_config=config)


def meta(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        mat = event.step_materialization_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    raise KeyError(f"{asset} not materialized")


def checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def resources_for(firehose: Path, lake: Path) -> dict:
    return {"firehose": FirehoseResource(root=str(firehose)), "lake": LakeResource(root=str(lake))}


def file_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).split(b"\n")


def gated_records(lake: LakeResource, firehose: Path, day: str, side: str | None = None) -> list[tuple[str, dict]]:
    """(trace_id, raw record) of primary-dialect traces that passed the gates on `day`, from the
    first firehose file (the simulator's late file is truncated on purpose)."""
    table = "split_traces" if side else "gated_traces"
    frame = lake.read_day(table, day).filter(
        (pl.col("dialect") == PRIMARY) & (pl.col("source_file") == "part-000.jsonl.gz"))
    if side:
        frame = frame.filter(pl.col("side") == side)
    lines = file_lines(firehose / f"day={day}" / "part-000.jsonl.gz")
    rows = frame.sort("source_line").iter_rows(named=True)
    return [(r["trace_id"], json.loads(lines[r["source_line"] - 1])) for r in rows]


def planted(template: dict, problem_id: str, query: str, **fields) -> bytes:
    """A copy of a real record asking another problem (a new eval run unless given)."""
    record = json.loads(json.dumps(template))
    record.update(problem_id=problem_id, eval_run_id=f"run-{problem_id}", **fields)
    record["problem"]["query"] = query
    for step in record["dialogue"]:
        info = step.get("extra_info") if isinstance(step, dict) else None
        if isinstance(info, dict):
            info["query"] = query
            if "problem_id" in info:
                info["problem_id"] = problem_id
    return json.dumps(record).encode() + b"\n"


def write_day(firehose: Path, day: str, name: str, lines: list[bytes]) -> None:
    folder = firehose / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"".join(lines))


def latent_of(root: Path, frame: pl.DataFrame) -> list[str | None]:
    """Latent problem of each leak_clusters row: by problem_id, or by text for dialects without one."""
    latent = json.loads((root / "suites" / "latent.json").read_text())
    by_text = {text_key(p.query): p.problem_id for f in ("product", "shop", "voucher")
               for p in load_suite(root / "suites" / f"{f}.json")}
    pairs = zip(frame["problem_id"], frame["query"])
    return [latent.get(pid) or latent.get(by_text.get(text_key(q), "")) for pid, q in pairs]


def lake_tables(root: Path, tables: tuple[str, ...]) -> dict[str, bytes]:
    # The contract path shape lists each day's current parts (older versions live under .versions).
    return {str(p.relative_to(root)): p.read_bytes() for t in tables
            for p in sorted((root / t).glob("day=*/part-*.parquet"))}


# ---------------------------------------------------------------- the arena, materialized once


@dataclass
class Arena:
    root: Path
    lake_root: Path
    resources: dict
    runs: dict[str, dg.ExecuteInProcessResult]
    reuploaded: str  # trace_id uploaded again on the last day
    train: dg.ExecuteInProcessResult | None = None
    heldout: dg.ExecuteInProcessResult | None = None

    @property
    def lake(self) -> LakeResource:
        return self.resources["lake"]

    @property
    def firehose(self) -> Path:
        return self.root / "firehose"


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Arena:
    root = tmp_path_factory.mktemp("arena")
    simulate(ArenaConfig(out=root, start_day=START, days=len(DAYS), traces_per_day=300, seed=7, problems_per_day=60))
    resources = resources_for(root / "firehose", root / "lake")
    instance = dg.DagsterInstance.ephemeral()
    runs, reuploaded = {}, ""
    for day in DAYS:
        runs[day] = run([*CORPUS, *SPLIT], resources, day, instance=instance)
        if day == DAYS[0]:  # a train trace of day 1 uploaded again, later, on the last day
            reuploaded, record = gated_records(resources["lake"], root / "firehose", day, side="train")[0]
            again = {**record, "updated_at": f"{DAYS[-1]}T12:00:00Z", "execution_time": REUPLOAD_MARK}
            write_day(root / "firehose", DAYS[-1], "part-zz-reupload.jsonl", [json.dumps(again).encode() + b"\n"])
    arena = Arena(root, root / "lake", resources, runs, reuploaded)
    arena.train = run([train_corpus], resources, instance=instance)
    arena.heldout = run([heldout_eval_set], resources, instance=instance,
                        ops={"heldout_eval_set": {"suites": [str(root / "suites")]}})
    return arena


# ---------------------------------------------------------------- leak clusters on the simulator


def test_no_latent_problem_is_split_and_few_clusters_over_merge(arena):
    frame = arena.lake.read_day("leak_clusters", DAYS[-1])
    frame = frame.with_columns(pl.Series("latent", latent_of(arena.root, frame), dtype=pl.String))
    assert frame["latent"].null_count() == 0, "every problem seen maps to a latent problem of the simulator"
    assert frame["problem_id"].n_unique() == frame.height
    per_latent = frame.group_by("latent").agg(pl.col("leak_cluster_id").n_unique().alias("clusters"))
    per_cluster = frame.group_by("leak_cluster_id").agg(pl.col("latent").n_unique().alias("latents"))
    split_rate = per_latent.filter(pl.col("clusters") >= 2).height / per_latent.height
    over_merge = per_cluster.filter(pl.col("latents") >= 2).height / per_cluster.height
    variants = frame.group_by("latent").len().filter(pl.col("len") >= 2).height
    print(f"\nleak clusters after {len(DAYS)} days: {frame.height} problems, {per_latent.height} latent problems "
          f"({variants} seen as >=2 variants), {per_cluster.height} clusters; split rate {split_rate:.4f}, "
          f"over-merge rate {over_merge:.4f}")
    assert variants >= 20, "the arena must ask several variants of one latent problem for this to mean anything"
    assert split_rate == 0.0
    assert over_merge <= 0.1


def test_leak_split_is_the_same_whatever_the_materialization_order(arena, tmp_path):
    expected = lake_tables(arena.lake_root, LEAK_TABLES)
    assert len(expected) == 3 * len(DAYS)
    skip = {*LEAK_TABLES, "split_traces", ".staging"}
    d1, d2, d3, d4 = DAYS
    normalized_d2 = f"normalized_traces/day={d2}"
    orders = {"reverse": [d4, d3, d2, d1], "again": [d1, d2, d3, d4, d2, d4], "late_day_2": [d1, d3, "+d2", d2, d4, d3]}
    replayed = {}
    for name, order in orders.items():
        lake_root = tmp_path / name
        shutil.copytree(arena.lake_root, lake_root, ignore=lambda d, names: [n for n in names if n in skip])
        if name == "late_day_2":  # day 2's traces arrive after days 1 and 3 were split
            shutil.move(lake_root / normalized_d2, tmp_path / "held-back")
        resources = resources_for(arena.firehose, lake_root)
        instance = dg.DagsterInstance.ephemeral()
        replayed[name] = []
        for day in order:
            if day == "+d2":
                shutil.move(tmp_path / "held-back", lake_root / normalized_d2)
                continue
            result = run(LEAK, resources, day, instance=instance)
            assert checks(result)["one_side_per_cluster"]
            replayed[name].append(meta(result, "leak_clusters")["replayed_from_first_day"])
        assert lake_tables(lake_root, LEAK_TABLES) == expected, name
    in_order = [meta(arena.runs[d], "leak_clusters")["replayed_from_first_day"] for d in DAYS]
    assert in_order == [True, False, False, False]
    assert replayed["reverse"] == [True, True, True, True]
    assert replayed["again"] == [True, False, False, False, False, False]
    # day 3 has no day-2 state; then day 4 finds day 3's state built without day 2: its chain no
    # longer matches the lake, so it replays instead of building on it
    assert replayed["late_day_2"] == [True, True, False, True, False]


def test_a_backfill_replays_its_days_in_one_run_as_day_by_day(arena, tmp_path):
    """A range of days in one run (the single-run backfill policy) writes the tables the day-by-day
    chain wrote, and each day keeps its own metadata and check."""
    lake_root = tmp_path / "range"
    skip = {*LEAK_TABLES, "split_traces", ".staging"}
    shutil.copytree(arena.lake_root, lake_root, ignore=lambda d, names: [n for n in names if n in skip])
    result = dg.materialize(LEAK, resources=resources_for(arena.firehose, lake_root), instance=dg.DagsterInstance.ephemeral(),
                            tags={"dagster/asset_partition_range_start": DAYS[0],
                                  "dagster/asset_partition_range_end": DAYS[-1]})
    assert result.success
    assert lake_tables(lake_root, LEAK_TABLES) == lake_tables(arena.lake_root, LEAK_TABLES)
    by_day = {e.step_materialization_data.materialization.partition:
              e.step_materialization_data.materialization.metadata for e in result.get_asset_materialization_events()}
    assert sorted(by_day) == DAYS
    for day in DAYS:
        expected = meta(arena.runs[day], "leak_clusters")
        assert by_day[day]["dagster/row_count"].value == expected["dagster/row_count"], day
        assert by_day[day]["replayed_from_first_day"].value == (day == DAYS[0]), day
    assert checks(result)["one_side_per_cluster"]


# ---------------------------------------------------------------- the guarded split


def test_split_is_leak_free(arena):
    for day in DAYS:
        assert checks(arena.runs[day]) == {"one_side_per_cluster": True, "largest_cluster_share": True,
                                           "conservation": True, "check_counts": True}
        split = arena.lake.read_day("split_traces", day)
        gated = arena.lake.read_day_columns("gated_traces", day, ["trace_id"])
        assert split.height == gated.num_rows > 80  # a day of real size (300 traces, about a third gated)
        assert set(split["side"].unique()) <= {"train", "heldout", "excluded"}
        assert split["leak_cluster_id"].null_count() == 0
        sides = split.group_by("leak_cluster_id").agg(pl.col("side").n_unique().alias("n"))
        assert sides["n"].max() == 1
    train = pl.read_parquet(Path(meta(arena.train, "train_corpus")["path"]) / "part-00000.parquet")
    heldout = pl.read_parquet(Path(meta(arena.heldout, "heldout_eval_set")["path"]) / "part-00000.parquet")
    assert train.height > 300 and heldout.height >= 5
    assert set(train["side"].unique()) == {"train"}
    assert not set(train["leak_cluster_id"]) & set(heldout["leak_cluster_id"])
    assert not set(train["problem_id"].drop_nulls()) & set(heldout["problem_id"])
    latest = arena.lake.read_day("leak_clusters", DAYS[-1])
    heldout_problems = set(latest.filter(pl.col("side") == "heldout")["problem_id"])
    assert not set(train["problem_id"].drop_nulls()) & heldout_problems


# ---------------------------------------------------------------- a held-out cluster leaks into train


LAMP = "Find a bamboo desk lamp from philips in navy, 12 inch, made of canvas, priced under 900 pesos"
PART_A, PART_B = "waterproof and rechargeable", "foldable with a dimmer"


def _draws(cfg: LeakConfig, side: str, query: str) -> str:
    """The first of some problem ids whose new cluster draws `side` under `cfg`."""
    for i in range(200):
        pid = f"merge-{side}-{i:03d}"
        index = LeakIndex.new(cfg)
        if index.add_day(DAYS[0], [ProblemRef(pid, query)]).assignments[0]["side"] == side:
            return pid
    raise AssertionError(f"no problem id draws {side}")


def test_a_heldout_cluster_linked_to_train_is_merged_logged_and_moved(arena, tmp_path):
    queries = {"a": f"{LAMP}, {PART_A}", "b": f"{LAMP}, {PART_B}", "c": f"{LAMP}, {PART_A}, {PART_B}"}
    bags = {k: canonical_tokens(q) for k, q in queries.items()}
    # c bridges a and b: close enough to each to link, while a and b alone stay apart
    assert jaccard(bags["a"], bags["b"]) < 0.7 <= min(jaccard(bags["c"], bags["a"]), jaccard(bags["c"], bags["b"]))
    share = 0.5  # one config for every day: a state is a pure function of the days and the config
    leak_cfg = LeakConfig(heldout_share=share)
    ids = {"a": _draws(leak_cfg, "heldout", queries["a"]), "b": _draws(leak_cfg, "train", queries["b"]), "c": "merge-c"}
    template = gated_records(arena.lake, arena.firehose, DAYS[0])[0][1]
    firehose, lake_root = tmp_path / "firehose", tmp_path / "lake"
    for day, key in zip(DAYS, "abc"):
        write_day(firehose, day, "part-000.jsonl", [planted(template, ids[key], queries[key])])
    resources = resources_for(firehose, lake_root)
    lake = resources["lake"]
    ops = {"leak_clusters": {"heldout_share": share}}
    results = [run([raw_firehose, *CORPUS_ASSETS, *LEAK], resources, day, ops=ops) for day in DAYS[:3]]
    sides = [dict(lake.read_day("leak_clusters", d).select("problem_id", "side").iter_rows()) for d in DAYS[:3]]
    assert sides[0] == {ids["a"]: "heldout"}
    assert sides[1] == {ids["a"]: "heldout", ids["b"]: "train"}
    assert sides[2] == {ids["a"]: "train", ids["b"]: "train", ids["c"]: "train"}
    day3 = lake.read_day("leak_clusters", DAYS[2])
    assert day3["leak_cluster_id"].n_unique() == 1
    m = meta(results[2], "leak_clusters")
    assert (m["merges_today"], m["moved_heldout_to_train_today"], m["side/train"]) == (1, 1, 3)
    assert "side/heldout" not in m  # the held-out set shrank to nothing
    assert all(checks(r)["one_side_per_cluster"] for r in results)
    assert lake.read_day("leak_merge_log", DAYS[1]).height == 0
    log = lake.read_day("leak_merge_log", DAYS[2]).to_dicts()
    assert len(log) == 1
    event = log[0]
    cluster_a = lake.read_day("leak_clusters", DAYS[0])["leak_cluster_id"][0]
    cluster_b = lake.read_day("leak_clusters", DAYS[1]).filter(pl.col("problem_id") == ids["b"])["leak_cluster_id"][0]
    head = (event["day"], event["kind"], event["leak_cluster_id"], event["side_after"])
    assert head == (DAYS[2], "merge", cluster_a, "train")
    assert json.loads(event["absorbed"]) == [cluster_b]
    assert json.loads(event["sides_before"]) == {cluster_a: "heldout", cluster_b: "train"}
    assert json.loads(event["moved_heldout_to_train"]) == [ids["a"]]
    assert json.loads(event["moved_to_excluded"]) == []
    assert day3["leak_cluster_id"][0] == cluster_a  # the oldest cluster's id survives the merge
    # Another config is another history: day 3 under heldout_share 0 replays from day 1, where a
    # was never held out, so nothing moves (a side cannot be changed per day by config).
    replay = run([leak_clusters], resources, DAYS[2], ops={"leak_clusters": {"heldout_share": 0.0}})
    assert meta(replay, "leak_clusters")["replayed_from_first_day"] is True
    assert json.loads(lake.read_day("leak_merge_log", DAYS[2])["moved_heldout_to_train"][0]) == []


def test_a_merge_that_moves_a_heldout_problem_flags_its_evaluation_stale(arena, tmp_path, monkeypatch):
    """The firehose knows problem a as `merge-heldout-…`, the suite with its ground truth by
    another id: one identity rule must still tie the evaluation to the leak clusters."""
    from shopdistill_assets.agent.policies_registry import PolicySpec, register
    from shopdistill_assets.evaluation.assets import not_stale, policy_eval, policy_partitions

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path / "home"))
    queries = {"a": f"{LAMP}, {PART_A}", "b": f"{LAMP}, {PART_B}", "c": f"{LAMP}, {PART_A}, {PART_B}"}
    share = 0.5
    ids = {"a": _draws(LeakConfig(heldout_share=share), "heldout", queries["a"]),
           "b": _draws(LeakConfig(heldout_share=share), "train", queries["b"]), "c": "merge-c"}
    suites = tmp_path / "suites"
    reward = load_suite(arena.root / "suites" / "product.json")[0].reward
    [truth] = load_suite(write_suite([Problem(queries["a"], "Product", reward)], suites / "planted.json"))
    assert truth.problem_id != ids["a"]  # the suite's own id (derived from the text), not the firehose's
    template = gated_records(arena.lake, arena.firehose, DAYS[0])[0][1]
    firehose, lake_root = tmp_path / "firehose", tmp_path / "lake"
    for day, key in zip(DAYS, "abc"):
        write_day(firehose, day, "part-000.jsonl", [planted(template, ids[key], queries[key])])
    resources = resources_for(firehose, lake_root)
    ops = {"leak_clusters": {"heldout_share": share}}
    instance = dg.DagsterInstance.ephemeral()
    run([raw_firehose, *CORPUS_ASSETS, *LEAK], resources, DAYS[0], ops=ops, instance=instance)
    heldout = run([heldout_eval_set], resources, ops={"heldout_eval_set": {"suites": [str(suites)]}}, instance=instance)
    rows = pl.read_parquet(Path(meta(heldout, "heldout_eval_set")["path"]) / "part-00000.parquet").to_dicts()
    assert [(r["problem_id"], r["suite_problem_id"]) for r in rows] == [(ids["a"], truth.problem_id)]

    register(PolicySpec(name="oracle", scripted="oracle"))
    instance.add_dynamic_partitions(policy_partitions.name, ["oracle"])
    eval_ops = {"policy_eval": {"samples": 1, "catalog": str(arena.root / "catalog")}}
    first = run([policy_eval, not_stale], resources, "oracle", ops=eval_ops, instance=instance)
    assert meta(first, "policy_eval")["asr"] == 1.0 and checks(first) == {"not_stale": True}

    for day in DAYS[1:3]:  # b trains; c links a to b: a's cluster is train-side from now on
        run([raw_firehose, *CORPUS_ASSETS, *LEAK], resources, day, ops=ops, instance=instance)
    assert dict(resources["lake"].read_day("leak_clusters", DAYS[2]).select("problem_id", "side").iter_rows())[
        ids["a"]] == "train"
    # the check alone, later, over every evaluation in the lake (no re-evaluation)
    again = dg.materialize([policy_eval, not_stale], selection=dg.AssetSelection.checks(not_stale),
                           resources=resources, instance=instance)
    [evaluation] = again.get_asset_check_evaluations()
    assert not evaluation.passed
    moved = evaluation.metadata["moved_problems"].value
    assert list(moved.values()) == [{ids["a"]: "train"}]


# ---------------------------------------------------------------- decontamination through the asset config


def rewrite(query: str) -> str:
    """A light rewrite: other case, other punctuation, the two halves of the sentence swapped."""
    words = query.rstrip(".?! ").split()
    half = len(words) // 2
    return (" ".join(words[half:]) + " -- " + " ".join(words[:half]) + "!!").upper()


def test_public_test_queries_are_excluded_everywhere(arena, shared_dir, tmp_path):
    public = shared_dir / "data" / "shoppingbench" / "synthesize_product_test.jsonl"
    if not public.is_file():
        pytest.skip(f"{public} absent")
    sb = [json.loads(line)["query"] for line in public.read_text().splitlines()[:12]]
    plants = {f"public-{i:02d}": q for i, q in enumerate(sb[:6])}
    plants |= {f"public-{i:02d}": rewrite(q) for i, q in enumerate(sb[6:], 6)}
    assert all(text_key(plants[f"public-{i:02d}"]) != text_key(q) for i, q in enumerate(sb[6:], 6))
    day = DAYS[0]
    firehose, lake_root = tmp_path / "firehose", tmp_path / "lake"
    shutil.copytree(arena.firehose / f"day={day}", firehose / f"day={day}")
    templates = [rec for _, rec in gated_records(arena.lake, arena.firehose, day)]
    write_day(firehose, day, "part-zz-public.jsonl",
              [planted(templates[i], pid, q) for i, (pid, q) in enumerate(sorted(plants.items()))])
    # ground truth for the planted problems too, so a held-out one would show in the eval set
    suites = tmp_path / "suites"
    shutil.copytree(arena.root / "suites", suites)
    reward = load_suite(suites / "product.json")[0].reward[0]
    write_suite([Problem(q, "Product", (reward,), problem_id=pid) for pid, q in sorted(plants.items())],
                suites / "planted.json")
    resources = resources_for(firehose, lake_root)
    run([*CORPUS, *SPLIT], resources, day)
    gated = resources["lake"].read_day("gated_traces", day)
    assert set(plants) <= set(gated["problem_id"]), "the planted traces pass the gates"

    def split_and_snapshot(decontaminate: list[str]):
        result = run(SPLIT, resources, day, ops={"leak_clusters": {"decontaminate": decontaminate}})
        train = run([train_corpus], resources)
        heldout = run([heldout_eval_set], resources, ops={"heldout_eval_set": {"suites": [str(suites)]}})
        read = lambda r, a: pl.read_parquet(Path(meta(r, a)["path"]) / "part-00000.parquet")  # noqa: E731
        return result, read(train, "train_corpus"), read(heldout, "heldout_eval_set")

    # without decontamination the planted problems are ordinary problems: train or held out
    result, train, heldout = split_and_snapshot([])
    sides = dict(resources["lake"].read_day("leak_clusters", day).select("problem_id", "side").iter_rows())
    assert {sides[p] for p in plants} <= {"train", "heldout"}
    assert set(plants) & (set(train["problem_id"]) | set(heldout["problem_id"]))

    result, train, heldout = split_and_snapshot([str(public)])
    leak = resources["lake"].read_day("leak_clusters", day)
    sides = dict(leak.select("problem_id", "side").iter_rows())
    assert {p: sides[p] for p in plants} == dict.fromkeys(plants, "excluded")
    assert checks(result)["one_side_per_cluster"]
    excluded_clusters = set(leak.filter(pl.col("side") == "excluded")["leak_cluster_id"])
    split = resources["lake"].read_day("split_traces", day)
    assert set(split.filter(pl.col("problem_id").is_in(list(plants)))["side"]) == {"excluded"}
    assert not set(plants) & set(train["problem_id"]) and not set(plants) & set(heldout["problem_id"])
    assert not excluded_clusters & (set(train["leak_cluster_id"]) | set(heldout["leak_cluster_id"]))
    m = meta(result, "leak_clusters")
    assert m["side/excluded"] == len(leak.filter(pl.col("side") == "excluded")) >= len(plants)
    assert m["decontaminate"]["sets"] == [str(public)]
    assert m["decontaminate"]["entries"] == 250
    assert m["decontaminate"]["by_source"] == {public.name: 250}
    print(f"\ndecontamination: {len(plants)} planted public queries (6 verbatim, 6 rewritten) -> "
          f"{m['side/excluded']} excluded problems, {len(excluded_clusters)} excluded clusters")


# ---------------------------------------------------------------- the train snapshot


def test_train_corpus_is_one_row_per_trace_loadable_and_versioned(arena, tmp_path):
    m = meta(arena.train, "train_corpus")
    folder = Path(m["path"])
    train = pl.read_parquet(folder / "part-00000.parquet")
    assert train.height == m["dagster/row_count"] == train["trace_id"].n_unique()
    # the trace uploaded again on the last day, with a later updated_at: that copy wins
    again = train.filter(pl.col("trace_id") == arena.reuploaded).to_dicts()
    assert len(again) == 1
    assert (again[0]["day"], again[0]["execution_time"], again[0]["source_file"]) == (
        DAYS[-1], REUPLOAD_MARK, "part-zz-reupload.jsonl")
    both = [arena.lake.read_day("split_traces", d).filter(pl.col("trace_id") == arena.reuploaded).height for d in DAYS]
    assert both[0] == 1 and both[-1] == 1

    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(folder / "part-00000.parquet"), split="train",
                              cache_dir=str(tmp_path / "hf-cache"))
    assert ds.num_rows == train.height
    first = ds[0]
    # conversational rows: `messages` are structs (SFTTrainer reads them as they are), tool-call
    # arguments and `tools` stay JSON text
    messages = first["messages"]
    assert [msg["role"] for msg in messages][:2] == ["system", "user"] and messages[1]["content"] == first["query"]
    calls = [c for msg in messages if msg["role"] == "assistant" for c in msg["tool_calls"] or []]
    assert calls and all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    assert isinstance(json.loads(first["tools"]), list)

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["days"] == DAYS and manifest["version"] == m["version"] == folder.name
    assert manifest["rows"] == train.height
    for day in DAYS:
        on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in sorted((arena.firehose / f"day={day}").iterdir())}
        assert {f["file"]: f["sha256"] for f in manifest["firehose_files"][day]} == on_disk
    assert manifest["content_sha256"] == hashlib.sha256((folder / "part-00000.parquet").read_bytes()).hexdigest()

    again_run = run([train_corpus], arena.resources)
    assert meta(again_run, "train_corpus")["version"] == m["version"]
    half = run([train_corpus], arena.resources, ops={"train_corpus": {"sample_fraction": 0.5}})
    half_ids = set(pl.read_parquet(Path(meta(half, "train_corpus")["path"]) / "part-00000.parquet")["trace_id"])
    share = len(half_ids) / train.height
    print(f"\ntrain_corpus {m['version']}: {train.height} traces; sample_fraction 0.5 keeps {len(half_ids)} "
          f"({share:.3f})")
    assert half_ids < set(train["trace_id"])
    assert 0.4 <= share <= 0.6


# ---------------------------------------------------------------- the held-out snapshot


def test_heldout_eval_set_is_one_scored_problem_per_heldout_cluster(arena):
    m = meta(arena.heldout, "heldout_eval_set")
    folder = Path(m["path"])
    frame = pl.read_parquet(folder / "part-00000.parquet")
    latest = arena.lake.read_day("leak_clusters", DAYS[-1])
    heldout_clusters = set(latest.filter(pl.col("side") == "heldout")["leak_cluster_id"])
    assert m["clusters_without_ground_truth"] == 0
    assert frame.height == m["dagster/row_count"] == len(heldout_clusters) >= 5
    assert set(frame["leak_cluster_id"]) == heldout_clusters and frame["leak_cluster_id"].n_unique() == frame.height
    suites = arena.root / "suites"
    truth = {p.problem_id: p for f in ("product", "shop", "voucher") for p in load_suite(suites / f"{f}.json")}
    by_category: dict[str, int] = {}
    latest_keys = set(latest["problem_id"])
    for row in frame.iter_rows(named=True):
        assert truth[row["suite_problem_id"]].query == row["query"]
        assert row["problem_id"] in latest_keys  # the one identity: the key leak_clusters files it under
        by_category[row["category"]] = by_category.get(row["category"], 0) + 1
    assert {k.removeprefix("category/"): v for k, v in m.items() if k.startswith("category/")} == by_category
    assert json.loads((folder / "manifest.json").read_text())["by_category"] == by_category
    print(f"\nheldout_eval_set {m['version']}: {frame.height} problems of {len(heldout_clusters)} held-out clusters, "
          f"{by_category}")

    problems = load_problems(folder)
    catalog = load_catalog(arena.root / "catalog")
    assert [p.problem_id for p in problems] == frame["problem_id"].to_list()
    suite_id = dict(zip(frame["problem_id"], frame["suite_problem_id"]))
    for problem in problems:
        assert problem.reward == truth[suite_id[problem.problem_id]].reward
        assert problem.voucher == truth[suite_id[problem.problem_id]].voucher
        result = score_recommendation(problem, [item["product_id"] for item in problem.reward], catalog)
        assert result.success, (problem.problem_id, result.reason)
        assert not score_recommendation(problem, [], catalog).success


def test_a_train_cluster_excluded_later_leaves_the_train_corpus(arena, shared_dir, tmp_path):
    public = shared_dir / "data" / "shoppingbench" / "synthesize_product_test.jsonl"
    if not public.is_file():
        pytest.skip(f"{public} absent")
    test_query = next(q for q in (json.loads(line)["query"] for line in public.read_text().splitlines())
                      if q.startswith("Show me women's jeans in size eu:30"))
    # day 1: a variant too far from the public query to match it (Jaccard < 0.8), close enough to
    # link with it (>= 0.7); day 2: the public query itself, which excludes the whole cluster
    variant = test_query.replace(", plain design", ", stretchy")
    assert 0.7 <= jaccard(canonical_tokens(variant), canonical_tokens(test_query)) < 0.8
    template = gated_records(arena.lake, arena.firehose, DAYS[0])[0][1]
    firehose, lake_root = tmp_path / "firehose", tmp_path / "lake"
    write_day(firehose, DAYS[0], "part-000.jsonl", [planted(template, "variant", variant)])
    write_day(firehose, DAYS[1], "part-000.jsonl", [planted(template, "public", test_query),
                                                     planted(template, "other", LAMP)])
    resources = resources_for(firehose, lake_root)
    ops = {"leak_clusters": {"decontaminate": [str(public)], "heldout_share": 0.0}}
    for day in DAYS[:2]:
        run([*CORPUS, *SPLIT], resources, day, ops=ops)
    lake = resources["lake"]
    sides = dict(lake.read_day("leak_clusters", DAYS[0]).select("problem_id", "side").iter_rows())
    assert sides == {"variant": "train"}
    assert dict(lake.read_day("leak_clusters", DAYS[1]).select("problem_id", "side").iter_rows()) == {
        "variant": "excluded", "public": "excluded", "other": "train"}
    train = pl.read_parquet(Path(meta(run([train_corpus], resources), "train_corpus")["path"]) / "part-00000.parquet")
    assert set(train["problem_id"]) == {"other"}
