"""The five training stages, end to end: DeepSpeed jobs launched through Dagster Pipes on CPU.

One simulated arena (2 days) goes through the corpus and split assets, then the whole chain
(training data, then sft -> resft -> teacher_sft -> kto -> dr_grpo) is materialized once on an
ephemeral instance, each stage a real `deepspeed` launch on the tiny Qwen3 (ZeRO-2; teacher_sft
on ZeRO-3). The tests then read the checkpoints, their lineage and the CLI over them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from resources.checkpoints import CheckpointStoreResource
from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from resources.launcher import TrainingLauncher
from shopdistill_assets.sim import ArenaConfig, simulate
from shopdistill_assets.training.stages import STAGE_ORDER, STAGES

START = date(2026, 11, 5)
DAYS = [(START + timedelta(days=d)).isoformat() for d in range(2)]
CORPUS_NAMES = ["raw_firehose", "normalized_traces", "agentic_traces", "subtask_traces", "gated_traces",
                "rejected_traces", "leak_clusters", "split_traces"]
SMALL = {"max_steps": 2, "learning_rate": 1e-3}  # lengths: the format gate's rule (14,336)
CHAIN_OPS = {
    "train_problems": {"limit": 5},
    "train_rollouts": {"samples": 2, "max_new_tokens": 48, "max_steps": 3},
    "teacher_rollouts": {"samples": 1},
    "kto_dataset": {"max_rows": 24, "max_steps_per_trace": 2},
    "sft_checkpoint": SMALL,
    "resft_checkpoint": SMALL,
    "teacher_sft_checkpoint": {**SMALL, "deepspeed": "zero3"},
    "kto_checkpoint": {"max_steps": 2, "per_device_train_batch_size": 2},
    "dr_grpo_checkpoint": {"max_steps": 2, "num_generations": 2, "max_completion_length": 24,
                           "per_device_train_batch_size": 2, "episode_reward": True},
}


def selected(names: list[str]) -> list:
    from shopdistill_assets.definitions import ASSET_CHECKS, ASSETS

    assets = [a for a in ASSETS if any(k.to_user_string() in names for k in a.keys)]
    checks = [c for c in ASSET_CHECKS if any(k.asset_key.to_user_string() in names for k in c.check_keys)]
    return [*assets, *checks]


def run(names: list[str], resources: dict, instance: dg.DagsterInstance, day: str | None = None,
        ops: dict | None = None, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if ops:
        config["ops"] = {name: {"config": cfg} for name, cfg in ops.items() if name in names}
    return dg.materialize(selected(names), partition_key=day, resources=resources, instance=instance,
                          run_config=config, selection=[dg.AssetKey(n) for n in names], raise_on_error=raise_on_error)


def meta(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        mat = event.step_materialization_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {"data_version": mat.tags.get("dagster/data_version"),
                    **{k: getattr(v, "value", v) for k, v in mat.metadata.items()}}
    raise KeyError(f"{asset} not materialized")


@dataclass
class Trained:
    root: Path
    home: Path
    resources: dict
    instance: dg.DagsterInstance
    chain: dg.ExecuteInProcessResult
    corpus_version: str

    @property
    def store(self):
        return self.resources["checkpoints"].store()

    @property
    def lake(self) -> LakeResource:
        return self.resources["lake"]


def make_resources(root: Path, checkpoints: Path) -> dict:
    return {"firehose": FirehoseResource(root=str(root / "firehose")), "lake": LakeResource(root=str(root / "lake")),
            "checkpoints": CheckpointStoreResource(root=str(checkpoints)),
            "launcher": TrainingLauncher(deepspeed_config="zero2", echo_output=False, work_dir=str(root / "train-runs"))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPDISTILL_HOME", str(home))
        simulate(ArenaConfig(out=home / "arena", start_day=START, days=len(DAYS), traces_per_day=160, seed=11,
                             problems_per_day=40))
        root = home / "arena"
        resources = make_resources(root, home / "checkpoints")
        instance = dg.DagsterInstance.ephemeral()
        for day in DAYS:
            run(CORPUS_NAMES, resources, instance, day)
        corpus = run(["train_corpus"], resources, instance)
        run(["heldout_eval_set"], resources, instance, ops={"heldout_eval_set": {"suites": [str(root / "suites")]}})
        names = ["train_problems", "train_rollouts", "teacher_rollouts", "resft_dataset", "teacher_sft_dataset",
                 "kto_dataset", "grpo_dataset", *[s.asset for s in STAGES.values()]]
        chain = run(names, resources, instance, ops=CHAIN_OPS)
        yield Trained(root, home, resources, instance, chain, meta(corpus, "train_corpus")["version"])


def test_five_stages_train_in_sequence_and_every_checkpoint_loads(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert trained.chain.success
    parent = None
    for name in STAGE_ORDER:
        m = meta(trained.chain, f"{name}_checkpoint")
        ref = trained.store.get(name, m["version"])
        assert m["data_version"] == ref.sha256 == m["sha256"]
        lineage = trained.store.lineage(ref)
        training = lineage["training"]
        if training.get("trained", True):
            assert training["steps"] == 2 and training["losses_finite"]
            assert m["loss_curve"].startswith("![") and "data:image/png;base64," in m["loss_curve"]  # inline
            assert lineage["effective"]["max_tokens"] == 14336 and "revision" in lineage["model"]
            assert all(math.isfinite(x) for x in training["losses"])
            assert m["deepspeed"] == ("zero3" if name == "teacher_sft" else "zero2")
        else:  # nothing to learn: the parent's weights, passed on, and said so
            assert ref.sha256 == parent.sha256 and "no rows" in training["reason"]
        if parent is None:
            assert lineage["parent"]["base_model"] == "tiny-qwen3"
        else:
            assert (lineage["parent"]["stage"], lineage["parent"]["version"]) == (parent.stage, parent.version)
        assert lineage["corpus"]["version"] == trained.corpus_version
        folder = trained.store.local_path(ref)
        assert list(folder.glob("*.safetensors")) and (folder / "README.md").read_text().startswith("# shopdistill")
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        assert model.config.model_type == "qwen3" and tokenizer.chat_template
        parent = ref
    print("\nchain: " + " -> ".join(f"{n}/{meta(trained.chain, n + '_checkpoint')['version']}" for n in STAGE_ORDER))


def test_the_stage_launches_leave_no_shared_memory_buffer(trained):
    """Each local deepspeed launch on CPU makes a 69 MB /dev/shm buffer named with its master port that
    DeepSpeed never unlinks; after the five stages none of their ports has one left."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    logs = sorted((trained.root / "train-runs").rglob("stage.log"))
    ports = {int(port) for log in logs for port in re.findall(r"--master_port[= ](\d+)", log.read_text(errors="replace"))}
    assert len(ports) >= 4, (ports, logs)  # the stages that trained (teacher_sft's may have had no rows)
    assert [p.name for port in ports for p in shm.glob(f"deepspeed_allreduce_buffer_*_{port}_*")] == []


def test_a_checkpoint_whose_weights_were_evaluated_takes_that_evaluation(trained, tmp_path):
    """A stage that passes its parent on has the parent's weights: its policy_eval takes the
    parent's episodes (said so in the metadata) rather than running them again; another setting,
    or reuse_same_weights=False, runs them."""
    import shutil

    from shopdistill_assets.agent.policies_registry import PolicySpec, policy_partitions, register

    ref = trained.store.get("sft", meta(trained.chain, "sft_checkpoint")["version"])
    twins = {}
    for name in ("twin_a", "twin_b"):  # two folders, one content
        twins[name] = shutil.copytree(trained.store.local_path(ref), tmp_path / name)
        register(PolicySpec(name=name, checkpoint=str(twins[name])), trained.home)
    trained.instance.add_dynamic_partitions(policy_partitions.name, list(twins))
    small = {"limit": 1, "samples": 1, "max_steps": 2, "max_new_tokens": 8,
             "catalog": str(trained.root / "catalog")}

    def evaluate(name: str, **changes) -> dict:
        return meta(run(["policy_eval"], trained.resources, trained.instance, name,
                        ops={"policy_eval": {**small, **changes}}), "policy_eval")

    first = evaluate("twin_a")
    assert "reused_from" not in first
    second = evaluate("twin_b")
    assert second["reused_from"] == first["rollouts"].rsplit("/", 1)[1]
    assert (second["asr"], second["episodes"]) == (first["asr"], first["episodes"])
    manifest = trained.lake.read_manifest("policy_eval", Path(second["rollouts"]).name)
    assert manifest["policy"]["name"] == "twin_b" and manifest["weights_sha256"] == ref.sha256
    assert "reused_from" not in evaluate("twin_b", samples=2)  # another setting: another evaluation
    assert "reused_from" not in evaluate("twin_b", reuse_same_weights=False)


def test_policies_evaluated_by_two_worker_processes_match_one_at_a_time(trained):
    """materialize_policies(workers=2) runs the evaluations in two spawned processes at once: the
    same episodes' results as one at a time, each its own Dagster run, in the order asked."""
    import dagster as dg

    from shopdistill_assets.agent.policies_registry import PolicySpec, register
    from shopdistill_assets.cli.runner import materialize_policies
    from shopdistill_assets.instance import project_instance

    register(PolicySpec(name="oracle", scripted="oracle"), trained.home)
    names = ["sft", "oracle", "kto"]
    ops = {"policy_eval": {"limit": 2, "samples": 2, "max_steps": 3, "max_new_tokens": 8, "reuse_same_weights": False,
                           "catalog": str(trained.root / "catalog")}}
    alone = materialize_policies(trained.resources, names, ops=ops)
    before = {r.dagster_run.run_id for r in project_instance().get_run_records()}
    paired = materialize_policies(trained.resources, names, ops=ops, workers=2)
    assert [r.day for r in paired] == names and all(r.success for r in alone + paired), [r.error for r in paired]

    def outcome(r):
        m = r.metadata["policy_eval"]
        return m["episodes"], m["asr"], m["pass_at_1"]

    assert [outcome(r) for r in paired] == [outcome(r) for r in alone]
    assert paired[1].metadata["policy_eval"]["asr"] == 1.0  # the oracle: a real evaluation ran
    records = [r for r in project_instance().get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
               if r.dagster_run.run_id not in before]
    assert sorted(r.dagster_run.tags.get("dagster/partition") for r in records) == sorted(names)  # one run each
    spans = sorted((r.start_time, r.end_time) for r in records)
    assert spans[1][0] < spans[0][1], spans  # the second run started before the first ended: two at once


def test_train_rollouts_run_as_a_job_beside_the_model(trained):
    """train_rollouts launches the rollout job (training/stages/rollouts.py) through the training
    launcher, as a stage is launched: locally the hf backend serves the new sft checkpoint in the
    job's own process (a GPU pod runs vLLM there); its rows are what resft_dataset reads."""
    m = meta(trained.chain, "train_rollouts")
    assert m["backend"] == "hf" and (m["problems"], m["dagster/row_count"]) == (5, 5 * 2)
    manifest = trained.lake.read_manifest("train_rollouts", m["version"])
    sft = meta(trained.chain, "sft_checkpoint")["version"]
    assert manifest["checkpoint"]["version"] == sft and manifest["policy"] == f"sft-{sft}"
    job = manifest["rollout_job"]
    run = trained.chain.run_id
    runs = trained.home / "checkpoints" / ".runs" / "train_rollouts"
    assert job["backend"] == "hf" and job["uri"] == str(runs / run / f"{run}.parquet")
    log = (trained.root / "train-runs" / "train_rollouts" / run / "stage.log").read_text()
    assert f"rollouts: 5 problems x 2: {m['successes']} of 10 succeeded" in log
    rollouts = trained.lake.read_snapshot("train_rollouts", m["version"])
    assert sorted(set(rollouts["sample"])) == [0, 1] and rollouts["problem_id"].n_unique() == 5
    assert set(rollouts["agent_version_id"]) == {f"sft-{sft}"}
    resft = meta(trained.chain, "resft_dataset")
    assert (resft["rollouts"], resft["kept"]) == (10, rollouts["success"].sum())


def test_lineage_names_the_corpus_the_days_and_the_files(trained):
    ref = trained.store.latest("sft")
    lineage = trained.store.lineage(ref)
    manifest = trained.lake.read_manifest("train_corpus", trained.corpus_version)
    assert lineage["dataset"]["asset"] == "train_corpus" and lineage["dataset"]["version"] == trained.corpus_version
    assert lineage["corpus"]["content_sha256"] == manifest["content_sha256"]
    assert lineage["days"] == DAYS
    for day in DAYS:
        on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in (trained.root / "firehose" / f"day={day}").iterdir()}
        assert {f["file"]: f["sha256"] for f in lineage["firehose_files"][day]} == on_disk
    assert lineage["libraries"]["trl"] and lineage["libraries"]["deepspeed"] and "commit" in lineage["code"]
    assert lineage["hyperparameters"]["max_steps"] == 2 and lineage["effective"]["max_steps"] == 2
    assert lineage["effective"]["max_tokens"] == 14336 and lineage["effective"]["report_to"] == ["tensorboard"]
    grpo = trained.store.lineage(trained.store.latest("dr_grpo"))["training"]
    assert grpo["loss_type"] == "dr_grpo" and grpo["scale_rewards"] == "none" and grpo["episode_reward"] is True
    assert 0.0 <= grpo["reward_flat_share"] <= 1.0  # groups whose generations all scored alike (no signal)
    kto = trained.store.lineage(trained.store.latest("kto"))
    assert kto["dataset"]["asset"] == "kto_dataset" and kto["corpus"]["version"] == trained.corpus_version
    # kto_dataset writes one label block after the other; the stage shuffles (seeded) before batching
    mix = kto["training"]["label_mix"]
    assert mix["batches"] >= 8 and mix["batches_with_both_labels"] >= mix["batches"] // 4


def cli(trained: Trained, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SHOPDISTILL_HOME": str(trained.home), "SHOPDISTILL_LAKE": str(trained.root / "lake"),
           "SHOPDISTILL_CHECKPOINTS": str(trained.home / "checkpoints")}
    return subprocess.run([sys.executable, "-m", "shopdistill_assets.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_shopdistill_lineage_of_the_last_checkpoint_and_of_a_day(trained):
    out = cli(trained, "lineage", "dr_grpo")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"train_corpus {trained.corpus_version}" in text
    for stage in STAGE_ORDER:
        assert f"checkpoint {stage}/" in text
    for day in DAYS:
        for f in (trained.root / "firehose" / f"day={day}").iterdir():
            assert f"{day}  {f.name}  sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}" in text
    by_day = cli(trained, "lineage", "--day", DAYS[0], "--json")
    uses = json.loads(by_day.stdout)
    assert {c["stage"] for c in uses["checkpoints"]} == set(STAGE_ORDER)
    assert trained.corpus_version in {s["version"] for s in uses["snapshots"]}
    unknown = cli(trained, "lineage", "--day", "2026-10-01", "--json")
    assert json.loads(unknown.stdout) == {"snapshots": [], "checkpoints": []}
    bad = cli(trained, "lineage", "no_such_stage")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "no stage" in bad.stderr


def test_a_new_corpus_marks_the_checkpoints_stale(trained):
    # What the UI's "stale" badge reads (Dagster 1.13's resolver; no public wrapper exists).
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    from shopdistill_assets.definitions import defs

    def status(key: str) -> StaleStatus:
        resolver = CachingStaleStatusResolver(trained.instance, defs.get_repository_def().asset_graph,
                                              LoadingContextForTest(trained.instance))
        return resolver.get_status(dg.AssetKey(key))

    assert status("sft_checkpoint") == StaleStatus.FRESH
    smaller = run(["train_corpus"], trained.resources, trained.instance, ops={"train_corpus": {"sample_fraction": 0.5}})
    assert meta(smaller, "train_corpus")["version"] != trained.corpus_version
    # what read the corpus is stale (Dagster marks direct dependents; the later stages follow once
    # these are re-materialized, since each checkpoint's data version is its content hash)
    assert status("sft_checkpoint") == StaleStatus.STALE and status("kto_dataset") == StaleStatus.STALE
    run(["train_corpus"], trained.resources, trained.instance)  # the original corpus again (same bytes)


def test_one_stage_alone_starts_from_the_newest_upstream_checkpoint(trained, tmp_path):
    before = trained.store.latest("teacher_sft")
    again = run(["teacher_sft_checkpoint"], trained.resources, trained.instance,
                ops={"teacher_sft_checkpoint": {**SMALL, "seed": 1, "learning_rate": 5e-3}})
    newest = trained.store.latest("teacher_sft")
    assert newest.version == meta(again, "teacher_sft_checkpoint")["version"] != before.version
    kto = run(["kto_checkpoint"], trained.resources, trained.instance, ops=CHAIN_OPS)
    lineage = trained.store.lineage(trained.store.get("kto", meta(kto, "kto_checkpoint")["version"]))
    assert (lineage["parent"]["stage"], lineage["parent"]["version"]) == ("teacher_sft", newest.version)

    # No upstream checkpoint at all: a clear failure, nothing launched.
    empty = {**trained.resources, "checkpoints": CheckpointStoreResource(root=str(tmp_path / "empty"))}
    failed = run(["kto_checkpoint"], empty, trained.instance, ops=CHAIN_OPS, raise_on_error=False)
    assert not failed.success
    message = next(e for e in failed.all_events if e.is_step_failure).step_failure_data.error.message
    assert "materialize teacher_sft_checkpoint first" in message


def test_train_side_check_blocks_a_planted_heldout_problem(trained):
    lake = trained.lake
    leak = lake.read_day("leak_clusters", DAYS[-1])
    held = leak.filter(pl.col("side") == "heldout").row(0, named=True)
    # the teacher's rollouts, with one row rewritten to ask a held-out problem
    version = lake.list_snapshots("teacher_rollouts")[0]
    rollouts = lake.read_snapshot("teacher_rollouts", version)
    planted = rollouts.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(held["problem_id"])).otherwise(pl.col("problem_id"))
        .alias("problem_id"),
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(held["query"])).otherwise(pl.col("query")).alias("query"))
    lake.write_snapshot("teacher_rollouts", "v-planted", planted,
                        {**lake.read_manifest("teacher_rollouts", version), "version": "v-planted",
                         "created_at": "9999-01-01T00:00:00"})
    instance = dg.DagsterInstance.ephemeral()  # no recorded versions: the newest snapshot is read
    result = run(["teacher_sft_dataset", "teacher_sft_checkpoint"], trained.resources, instance, ops=CHAIN_OPS,
                 raise_on_error=False)
    verdicts = {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}
    check = verdicts[("teacher_sft_dataset", "train_side_only")]
    assert not check.passed and check.metadata["side/heldout"].value == 1
    # blocking: the stage that would have trained on it did not run
    trained_assets = {e.step_materialization_data.materialization.asset_key.to_user_string()
                      for e in result.get_asset_materialization_events()}
    assert "teacher_sft_checkpoint" not in trained_assets and not result.success
    # and the clean inputs of the chain all passed
    clean = {(e.asset_key.to_user_string(), e.check_name): e.passed
             for e in trained.chain.get_asset_check_evaluations()}
    assert clean and all(clean.values())


def test_unfiltered_corpus_and_the_outcome_filter_for_the_ablation(trained):
    """train_corpus can be built from every normalized trace (no structural filter, no gates:
    the distillation benchmark's ablation), still train-side only; the sft stage's outcome
    filter trains on the successful rows alone and says so in the lineage. Runs last: it
    publishes an sft checkpoint on that corpus, then makes the gated corpus the newest again."""
    gated = trained.lake.read_manifest("train_corpus", trained.corpus_version)
    ablation = run(["train_corpus"], trained.resources, trained.instance,
                   ops={"train_corpus": {"source": "normalized_traces"}})
    version = meta(ablation, "train_corpus")["version"]
    manifest = trained.lake.read_manifest("train_corpus", version)
    assert version != trained.corpus_version and manifest["source"].startswith("normalized_traces")
    assert manifest["rows"] > gated["rows"]
    assert all(e.passed for e in ablation.get_asset_check_evaluations())  # train_side_only included
    corpus = trained.lake.read_snapshot("train_corpus", version)
    assert set(corpus["side"].unique()) == {"train"}
    sft = run(["sft_checkpoint"], trained.resources, trained.instance,
              ops={"sft_checkpoint": {**SMALL, "max_steps": 1, "only_successful": True}})
    lineage = trained.store.lineage(trained.store.get("sft", meta(sft, "sft_checkpoint")["version"]))
    assert lineage["effective"]["only_successful"] is True and lineage["corpus"]["version"] == version
    successes = corpus.filter(pl.col("score") >= 1).height
    training = lineage["training"]  # counted after tokenization: the length rule drops, and says so
    assert training["rows"] + training["rows_too_long_dropped"] == successes < training["rows_read"] == corpus.height
    assert training["rows"] > 0
    restored = run(["train_corpus"], trained.resources, trained.instance)
    assert meta(restored, "train_corpus")["version"] == trained.corpus_version


def test_rollouts_episode_deadline_is_configurable(trained):
    """The rollouts' per-episode deadline (ORO's 300 s by default) is a config field: a benchmark
    serving a checkpoint on a loaded CPU raises it; one too short fails every episode by timeout."""
    from shopdistill_assets.training.data_assets import RolloutsConfig

    assert RolloutsConfig().episode_time_limit_s == 300.0
    result = run(["teacher_rollouts"], trained.resources, trained.instance,
                 ops={"teacher_rollouts": {"samples": 1, "episode_time_limit_s": 1e-6}})
    version = meta(result, "teacher_rollouts")["version"]
    rollouts = trained.lake.read_snapshot("teacher_rollouts", version)
    assert rollouts.height > 0 and not rollouts["success"].any()
    assert set(rollouts["failure_reason"].unique()) == {"episode_timeout"}


# ---------------------------------------------------------------- a stage as a pod runs it


def _sft_snapshot(folder: Path, n: int, method: str = "sft") -> Path:
    """A dataset snapshot of n two-step trajectories: SFT rows (scored 1) or Dr. GRPO prompts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shopdistill_assets.training.stages import rows

    tools = json.dumps([{"type": "function", "function": {"name": "find_product", "parameters": {}}}])
    traces = []
    for i in range(n):
        calls = [{"id": "c1", "type": "function", "function": {"name": "find_product",
                                                               "arguments": json.dumps({"q": f"kettle {i}"})}}]
        messages = [{"role": "user", "content": f"a kettle {i}"}, {"role": "assistant", "content": "",
                                                                   "reasoning_content": "search", "tool_calls": calls},
                    {"role": "tool", "tool_call_id": "c1", "content": "[]"},
                    {"role": "assistant", "content": "", "tool_calls": [{**calls[0], "id": "c2", "function": {
                        "name": "recommend_product", "arguments": json.dumps({"product_ids": str(i)})}}]}]
        traces.append({"trace_id": f"t{i}", "problem_id": f"p{i}", "query": "q", "category": "Product",
                       "messages": json.dumps(messages), "tools": tools})
    folder.mkdir(parents=True, exist_ok=True)
    if method == "dr_grpo":
        prompts = rows.to_table(list(rows.grpo_rows(traces, "teacher")), rows.GRPO_SCHEMA)
        pq.write_table(prompts, folder / "part-0.parquet")
        return folder
    table = rows.to_table(rows.sft_rows(traces, "corpus"), rows.SFT_SCHEMA)
    pq.write_table(table.append_column("score", pa.array([1.0] * n)), folder / "part-0.parquet")
    return folder


def test_a_stage_runs_from_s3_uris_alone_and_resumes_after_a_kill(moto_s3, tmp_path):
    """What a GPU pod gets is URIs: the stage config (by reference), the parent checkpoint and
    the dataset are s3:// objects the script fetches itself; it publishes to the S3 store. Killed
    after its first saved step, the same stage run again resumes from the newest saved step, and
    the lineage says so."""
    import time

    import boto3
    import yaml

    from resources.checkpoint_store import CheckpointStore
    from shopdistill_assets.training.tiny_model import build_tiny_model

    s3 = boto3.client("s3", endpoint_url=moto_s3)
    for bucket in ("lake", "models"):
        s3.create_bucket(Bucket=bucket)
    store = CheckpointStore("s3://models/ckpt", endpoint_url=moto_s3, cache_dir=str(tmp_path / "cache"))
    base = build_tiny_model(tmp_path / "base")
    parent = store.publish("sft", Path(base), {"stage": "sft", "created_at": "2026-12-01"}, "# card")
    for part in _sft_snapshot(tmp_path / "snapshot", 6).iterdir():
        s3.upload_file(str(part), "lake", f"train/v1/{part.name}")
    state = store.run_uri("resft", "run1", "state")
    config = {"stage": "resft", "model_name_or_path": parent.uri, "dataset": "s3://lake/train/v1",
              "output_dir": str(tmp_path / "pod1"), "publish_to": store.root, "s3_endpoint_url": moto_s3,
              "lineage": {"parent": parent.to_dict(), "days": [], "dataset": {"asset": "resft_dataset", "version": "v1"}},
              "state_uri": state, "max_steps": 400,
              "save_steps": 2, "max_length": 2048, "learning_rate": 1e-3}
    config_uri = store.put_text(store.run_uri("resft", "run1", "run1.yaml"), yaml.safe_dump(config))
    script = [sys.executable, str(Path(__file__).resolve().parents[1] / "shopdistill_assets" / "training" / "stages" / "sft.py"),
              "--config", config_uri]
    env = {**os.environ, "SHOPDISTILL_S3_ENDPOINT_URL": moto_s3}
    pod = subprocess.Popen(script, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 400
    def saved_steps() -> list[int]:
        return [int(n.split("-")[1]) for n in store.children(state) if store.exists(f"{state}/{n}/COMPLETE")]

    # any saved step will do: older ones are dropped once a newer one is complete, so polling for
    # checkpoint-2 alone can miss it on a fast machine
    while not saved_steps():
        assert pod.poll() is None, pod.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no step saved to the store"
        time.sleep(0.5)
    pod.kill()  # preempted
    pod.wait()
    steps = saved_steps()
    saved = max(steps)
    assert saved >= 2 and len(steps) <= 2  # older steps are dropped once a newer one is complete
    again = subprocess.run([*script, "--max_steps", str(saved + 2), "--output_dir", str(tmp_path / "pod2")], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.returncode, again.stdout[-1500:], again.stderr[-1500:])
    report = next(json.loads(line) for line in again.stdout.splitlines() if line.startswith('{"materialization"'))
    meta_ = report["materialization"]
    assert meta_["status"] == "trained" and meta_["uri"].startswith("s3://models/ckpt/resft/")
    lineage = store.lineage(store.get("resft", meta_["version"]))
    training = lineage["training"]
    assert training["resumed_from_step"] == saved and training["steps"] == saved + 2
    assert training["rows"] == training["rows_read"] == 6 and training["rows_too_long_dropped"] == 0
    assert lineage["model"]["source"] == parent.uri  # fetched inside the stage, from S3
    effective = lineage["effective"]
    assert effective["learning_rate"] == 1e-3 and effective["max_tokens"] == 2048 and effective["use_peft"] is False
    assert effective["only_successful"] is True and effective["warmup_steps"] == 0.03
    version_keys = [o["Key"] for o in s3.list_objects_v2(Bucket="models", Prefix=f"ckpt/resft/{meta_['version']}/")
                    ["Contents"]]
    assert any("/runs/" in k and "tfevents" in k for k in version_keys)  # training curves, with the checkpoint
    assert not (tmp_path / "pod2" / "checkpoint").exists()  # the store has it; the pod's copy is gone


def test_lora_is_a_flag_and_publishes_a_merged_full_model(tmp_path):
    """`--use_peft` (TRL's ModelConfig) trains a LoRA adapter; the checkpoint is the merged full
    model, so the next stage and serving load it like any other; lineage records the LoRA values."""
    from transformers import AutoModelForCausalLM

    from shopdistill_assets.training.tiny_model import build_tiny_model

    base = build_tiny_model(tmp_path / "base")
    config = tmp_path / "stage.yaml"
    config.write_text(json.dumps({"stage": "sft", "model_name_or_path": str(base), "output_dir": str(tmp_path / "out"),
                                  "dataset": str(_sft_snapshot(tmp_path / "snapshot", 4)), "max_steps": 2,
                                  "learning_rate": 1e-2, "report_to": [], "lineage": {"days": []}}))
    script = Path(__file__).resolve().parents[1] / "shopdistill_assets" / "training" / "stages" / "sft.py"
    done = subprocess.run([sys.executable, str(script), "--config", str(config), "--use_peft", "--lora_r", "4",
                           "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj"], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "out" / "checkpoint"
    lineage = json.loads((folder / "lineage.json").read_text())
    assert lineage["training"]["steps"] == 2 and lineage["effective"]["use_peft"] is True
    assert lineage["effective"]["report_to"] == [] and not (folder / "runs").exists()  # the user's report_to kept
    assert (lineage["effective"]["lora_r"], lineage["effective"]["lora_alpha"]) == (4, 8)
    assert not (folder / "adapter_config.json").exists() and (folder / "model.safetensors").exists()
    merged = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    original = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not merged.state_dict()[q].equal(original.state_dict()[q])  # the adapter is in the weights
    up = "model.layers.0.mlp.up_proj.weight"  # not a LoRA target: unchanged
    assert merged.state_dict()[up].equal(original.state_dict()[up])


@pytest.mark.parametrize("method, lengths", [("sft", {"max_length": 8}),
                                             ("dr_grpo", {"max_tokens": 40, "max_completion_length": 32})])
def test_a_stage_with_no_row_within_the_length_rule_writes_no_checkpoint(method, lengths, tmp_path):
    """Rows there, none left after the length rule (counted after tokenization): the stage says
    so, reports `nothing_to_learn` with the counts, and writes no checkpoint (the asset then
    passes the parent on as `trained: false`), never a 0-step checkpoint marked trained."""
    from shopdistill_assets.training.tiny_model import build_tiny_model

    dataset = _sft_snapshot(tmp_path / "snapshot", 3, method)
    config = tmp_path / "stage.yaml"
    config.write_text(json.dumps({"stage": method, "model_name_or_path": str(build_tiny_model(tmp_path / "base")),
                                  "output_dir": str(tmp_path / "out"), "report_to": [], "dataset": str(dataset),
                                  "lineage": {"days": []}, **lengths}))
    script = Path(__file__).resolve().parents[1] / "shopdistill_assets" / "training" / "stages" / f"{method}.py"
    done = subprocess.run([sys.executable, str(script), "--config", str(config)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = next(json.loads(line)["materialization"] for line in done.stdout.splitlines()
                  if line.startswith('{"materialization"'))
    read = pl.read_parquet(dataset).height
    assert report["status"] == "nothing_to_learn" and "within 8 tokens" in report["reason"]
    assert (report["rows_read"], report["rows"], report["rows_too_long_dropped"]) == (read, 0, read)
    assert not (tmp_path / "out" / "checkpoint").exists()


TWO_RANKS = '''
import sys
import deepspeed, torch
from transformers import AutoModelForCausalLM
from shopdistill_assets.training.stages.common import end_distributed, model_params, rank, reporting
deepspeed.init_distributed(dist_backend="gloo")
ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                            "stage3_gather_16bit_weights_on_model_save": True}}
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])  # ZeRO-3 partitions it at initialize
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3), config=ds)
ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
loss = engine(input_ids=ids, labels=ids).loss
engine.backward(loss)
engine.step()
local = sum(p.numel() for p in engine.module.parameters())
state = engine._zero3_consolidated_16bit_state_dict()  # every rank takes part; rank 0 gets the weights
with reporting() as pipes:
    if pipes is not None:
        pipes.report_asset_materialization(metadata={
            "rank": rank(), "params": model_params(engine.module), "local_numel": local, "loss": float(loss),
            "gathered": sum(v.numel() for v in (state or {}).values())})
end_distributed()  # as a stage's main does: gloo's threads left to the exit can abort a finished rank
'''


def test_two_ranks_on_cpu_report_from_rank_0_and_gather_the_weights(tmp_path):
    """Two DeepSpeed ranks over gloo (the raw engine: HF's trainer refuses two CPU processes):
    ZeRO-3 partitions the weights, the parameter count the report uses is the whole model's,
    saving gathers every shard to rank 0, and only rank 0 reports."""
    import socket

    from transformers import AutoModelForCausalLM

    from shopdistill_assets.training.tiny_model import build_tiny_model

    base = build_tiny_model(tmp_path / "base")
    total = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(base).parameters())
    (tmp_path / "ranks.py").write_text(TWO_RANKS)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "ranks.py"), str(base)], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}) for r in (0, 1)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    reports = [[json.loads(line)["materialization"] for line in out.splitlines() if line.startswith('{"materi')]
               for out, _ in outputs]
    assert len(reports[0]) == 1 and reports[1] == []  # rank 0 alone
    (report,) = reports[0]
    assert report["rank"] == 0 and report["params"] == total and report["local_numel"] < total
    assert report["gathered"] >= total and math.isfinite(report["loss"])


def test_a_launch_removes_the_shared_memory_buffer_deepspeed_leaves(tmp_path):
    """DeepSpeed's CPU allreduce leaves /dev/shm/deepspeed_allreduce_buffer_<rank>_<addr>_<port>_<n>
    behind (69 MB a launch, held until reboot): the launcher removes its own launch's, no other."""
    from resources.launcher import remove_shm_buffers

    mine, other = "deepspeed_allreduce_buffer_0_127.0.0.1_41234_0", "deepspeed_allreduce_buffer_0_127.0.0.1_412345_0"
    for name in (mine, other, "unrelated_41234_"):
        (tmp_path / name).write_bytes(b"x")
    assert remove_shm_buffers(41234, shm=tmp_path) == [mine]
    assert sorted(p.name for p in tmp_path.iterdir()) == [other, "unrelated_41234_"]
