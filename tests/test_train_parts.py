"""The training stages' plain parts: rows for TRL, rewards, the checkpoint store, lineage queries,
the train-side rule, the launcher's pod spec. No trainer runs here (test_training.py does that)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from resources.checkpoint_store import (
    LINEAGE_FILE,
    CheckpointNotFound,
    CheckpointStore,
    content_sha256,
)
from shopdistill_assets.corpus.messages import with_structured_messages
from shopdistill_assets.split.train_side import not_train_side, problem_sides, train_side_truths
from shopdistill_assets.training.lineage import chain, merge_files, model_card, uses_of_day
from shopdistill_assets.training.stages import rows
from shopdistill_assets.training.stages.kto import class_weights
from shopdistill_assets.training.stages.rewards import completion_calls, format_score, tool_match_score

CALL = {"id": "c1", "type": "function", "function": {"name": "find_product", "arguments": '{"q":"kettle","page":1}'}}
TRACE = {
    "trace_id": "t1", "problem_id": "p1", "query": "a kettle", "category": "Product",
    "messages": json.dumps([
        {"role": "system", "content": "sys"}, {"role": "user", "content": "a kettle"},
        {"role": "assistant", "content": "", "reasoning_content": "search first", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "[]"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "recommend_product",
                                                          "arguments": '{"product_ids":"123"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "\"Recommended.\""},
    ]),
    "tools": json.dumps([{"type": "function", "function": {"name": "find_product"}}]),
}


# ---------------------------------------------------------------- rows


def test_sft_rows_are_conversational_with_arguments_as_json_text():
    table = rows.to_table(rows.sft_rows([TRACE], "corpus"), rows.SFT_SCHEMA)
    assert table.schema.field("messages").type == rows.MESSAGES_TYPE
    messages = table.column("messages").to_pylist()[0]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[2]["reasoning_content"] == "search first" and messages[4]["reasoning_content"] is None
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"q":"kettle","page":1}'
    assert messages[3]["tool_call_id"] == "c1" and messages[0]["tool_calls"] is None
    # already structured input (a train_corpus snapshot) gives the same rows
    again = rows.to_table(rows.sft_rows([{**TRACE, "messages": messages}], "corpus"), rows.SFT_SCHEMA)
    assert again.equals(table)


def test_kto_and_grpo_rows_cut_trajectories_at_assistant_turns():
    kto = list(rows.kto_rows([TRACE], False, "undesirable", max_steps_per_trace=1))
    assert len(kto) == 1 and kto[0]["step"] == 1 and kto[0]["label"] is False
    assert kto[0]["completion"][0]["tool_calls"][0]["function"]["name"] == "recommend_product"
    assert [m["role"] for m in kto[0]["prompt"]] == ["system", "user", "assistant", "tool"]
    grpo = list(rows.grpo_rows([TRACE], "teacher"))
    assert [(r["step"], r["reference_name"]) for r in grpo] == [(0, "find_product"), (1, "recommend_product")]
    assert [m["role"] for m in grpo[0]["prompt"]] == ["system", "user"]
    assert rows.to_table(grpo, rows.GRPO_SCHEMA).num_rows == 2
    first_only = list(rows.grpo_rows([TRACE], "teacher", max_prompt_chars=rows.prompt_chars(grpo[0]["prompt"],
                                                                                            TRACE["tools"])))
    assert [r["step"] for r in first_only] == [0]  # the longer, later prompt is left out
    assert rows.to_table([], rows.KTO_SCHEMA).num_rows == 0


def test_with_structured_messages_keeps_every_other_column():
    table = pa.table({"trace_id": ["t1"], "messages": [TRACE["messages"]], "tools": [TRACE["tools"]]})
    out = with_structured_messages(table)
    assert out.column_names == table.column_names and out.schema.field("messages").type == rows.MESSAGES_TYPE


# ---------------------------------------------------------------- rewards


@pytest.mark.parametrize("completion, expected", [
    ([{"role": "assistant", "content": "", "tool_calls": [CALL]}], 1.0),
    ([{"role": "assistant", "content": '<tool_call>\n{"name": "find_product", "arguments": {"q": "x", "page": 1}}\n'
                                       '</tool_call>'}], 1.0),
    ([{"role": "assistant", "content": '<tool_call>{"name": "find_product", "arguments": {"page": 9}}</tool_call>'}],
     0.0),  # missing q, page out of range
    ([{"role": "assistant", "content": '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'}], 0.0),
    ([{"role": "assistant", "content": "<tool_call>{not json</tool_call>"}], 0.0),
    ([{"role": "assistant", "content": "I would search."}], 0.0),
    ([{"role": "assistant", "content": "", "tool_calls": [CALL, CALL]}], 0.0),  # one call a step
])
def test_format_score(completion, expected):
    assert format_score(completion) == expected


def test_tool_match_score_rewards_name_then_keys_then_values():
    ref = ('find_product', '{"q": "Kettle", "page": 1}')
    same = [{"role": "assistant", "tool_calls": [CALL]}]
    assert tool_match_score(same, *ref) == 1.0  # values compare case-insensitively
    other_value = [{"role": "assistant", "tool_calls": [{**CALL, "function": {
        "name": "find_product", "arguments": '{"q": "mug", "page": 1}'}}]}]
    assert tool_match_score(other_value, *ref) == pytest.approx((1 + 1 + 0.5) / 3)
    extra_key = [{"role": "assistant", "tool_calls": [{**CALL, "function": {
        "name": "find_product", "arguments": '{"q": "kettle", "page": 1, "sort": "priceasc"}'}}]}]
    assert tool_match_score(extra_key, *ref) == pytest.approx((1 + 2 / 3 + 1) / 3)
    wrong_tool = [{"role": "assistant", "tool_calls": [{**CALL, "function": {
        "name": "terminate", "arguments": '{"status": "success"}'}}]}]
    assert tool_match_score(wrong_tool, *ref) == 0.0
    assert completion_calls([{"role": "assistant", "content": "no call"}]) == []


def test_shopping_environment_scores_the_policys_own_recommendation():
    from shopdistill_assets.sim.toy_world import toy_world
    from shopdistill_assets.training.stages.rewards import ShoppingEnvironment

    catalog, problems = toy_world(seed=3, n_problems=3)
    problem = problems[0]
    answer = ",".join(str(item["product_id"]) for item in problem.reward)
    ShoppingEnvironment.catalog = catalog
    env = ShoppingEnvironment()
    teacher = [{"role": "assistant", "tool_calls": [{"function": {"name": "recommend_product",
                                                                  "arguments": json.dumps({"product_ids": answer})}}]}]
    env.reset(problem_json=json.dumps(problem.to_dict()), prompt=teacher)
    assert env.get_reward() == 0.0  # the teacher's recommendation in the prompt is not the policy's
    results = json.loads(env.find_product(q=problem.query.split()[0], page=1))
    assert isinstance(results, list)
    env.recommend_product(product_ids="1")
    assert env.get_reward() == 0.0
    env.recommend_product(product_ids=answer)
    assert env.get_reward() == 1.0
    env.reset(problem_json=None)
    assert env.get_reward() == 0.0


def test_kto_class_weights_balance_the_two_labels():
    assert class_weights([True] * 10 + [False] * 90) == {"desirable_weight": 9.0, "undesirable_weight": 1.0}
    assert class_weights([True] * 30 + [False] * 10) == {"desirable_weight": 1.0, "undesirable_weight": 3.0}
    assert class_weights([True, True]) == {"desirable_weight": 1.0, "undesirable_weight": 1.0}


# ---------------------------------------------------------------- the checkpoint store


def fake_checkpoint(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "tokenizer.json").write_text("{}")
    return folder


def lineage_for(stage: str, parent: dict, days: list[str], created: str) -> dict:
    return {"stage": stage, "parent": parent, "dataset": {"asset": "train_corpus", "version": "v1", "rows": 3},
            "corpus": {"version": "v1"}, "days": days, "created_at": created,
            "firehose_files": {d: [{"file": "a.jsonl.gz", "sha256": "ab"}] for d in days}}


def exercise_store(store: CheckpointStore, tmp_path: Path) -> None:
    a = fake_checkpoint(tmp_path / "a", b"weights-a")
    ref = store.publish("sft", a, lineage_for("sft", {"base_model": "tiny"}, ["2026-11-01"], "2026-12-01T00:00:00"),
                        "# card")
    assert ref.sha256 == content_sha256(a) and ref.version == ref.sha256[:16]
    (a / LINEAGE_FILE).write_text("{}")  # lineage and card are not content
    assert content_sha256(a) == ref.sha256
    again = store.publish("sft", a, lineage_for("sft", {"base_model": "tiny"}, ["2026-11-01"], "2026-12-02T00:00:00"),
                          "# card")
    assert again == ref and len(store.list("sft")) == 1  # same bytes, same version
    b = fake_checkpoint(tmp_path / "b", b"weights-b")
    newer = store.publish("sft", b, lineage_for("sft", {"base_model": "tiny"}, ["2026-11-02"], "2026-12-03T00:00:00"),
                          "# card")
    assert store.latest("sft") == newer and store.resolve("sft") == newer
    assert store.resolve(f"sft/{ref.version[:6]}") == ref
    assert store.lineage(newer)["checkpoint"] == newer.to_dict()
    local = store.local_path(ref)
    assert (local / "model.safetensors").read_bytes() == b"weights-a" and (local / "sub" / "tokenizer.json").exists()
    with pytest.raises(CheckpointNotFound, match="materialize the kto stage first"):
        store.latest("kto")
    with pytest.raises(CheckpointNotFound, match="no stage 'nope'"):
        store.resolve("nope")


def test_checkpoint_store_in_a_folder(tmp_path):
    store = CheckpointStore(str(tmp_path / "store"))
    exercise_store(store, tmp_path)
    # an unfinished publish (no lineage.json) is never listed
    fake_checkpoint(tmp_path / "store" / "sft" / "0000deadbeef0000", b"partial")
    assert len(store.list("sft")) == 2
    assert store.resolve(str(store.latest("sft").uri)) == store.latest("sft")


def test_checkpoint_store_on_s3(moto_s3, tmp_path):
    import boto3

    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="models")
    store = CheckpointStore("s3://models/checkpoints", endpoint_url=moto_s3, cache_dir=str(tmp_path / "cache"))
    exercise_store(store, tmp_path)
    assert store.stages() == ["sft"]


# ---------------------------------------------------------------- lineage queries


def lineages() -> list[dict]:
    out, parent = [], {"base_model": "tiny"}
    for i, stage in enumerate(["sft", "resft", "kto"]):
        days = ["2026-11-01", "2026-11-02"] if stage == "sft" else (["2026-11-03"] if stage == "kto" else [])
        lin = lineage_for(stage, parent, days, f"2026-12-0{i + 1}")
        lin["checkpoint"] = {"stage": stage, "version": f"{stage}v", "sha256": f"{stage}sha", "uri": "x"}
        out.append(lin)
        parent = {"stage": stage, "version": f"{stage}v"}
    other = lineage_for("sft", {"base_model": "tiny"}, ["2026-11-09"], "2026-12-09")
    other["checkpoint"] = {"stage": "sft", "version": "sft2", "sha256": "s2", "uri": "y"}
    return [*out, other]


def test_chain_walks_parents_to_the_base_model():
    links = chain(lineages(), "kto", "ktov")
    assert [l["checkpoint"]["stage"] for l in links] == ["kto", "resft", "sft"]
    assert chain(lineages(), "kto", "missing") == []


def test_uses_of_a_day_follow_descendants():
    manifests = [{"asset": "train_corpus", "version": "v1", "rows": 3, "days": ["2026-11-01", "2026-11-02"]},
                 {"asset": "kto_dataset", "version": "k1", "rows": 5, "days": ["2026-11-03"]}]
    uses = uses_of_day(lineages(), manifests, "2026-11-02")
    assert uses["snapshots"] == [{"asset": "train_corpus", "version": "v1", "rows": 3}]
    assert [(c["stage"], c["direct"]) for c in uses["checkpoints"]] == [("sft", True), ("resft", False), ("kto", False)]
    assert [c["stage"] for c in uses_of_day(lineages(), manifests, "2026-11-03")["checkpoints"]] == ["kto"]


def test_merge_files_and_model_card():
    merged = merge_files({"d1": [{"file": "b", "sha256": "2"}, {"file": "a", "sha256": "1"}]},
                         {"d1": [{"file": "a", "sha256": "1"}], "d0": [{"file": "c", "sha256": "3"}]})
    assert merged == {"d0": [{"file": "c", "sha256": "3"}],
                      "d1": [{"file": "a", "sha256": "1"}, {"file": "b", "sha256": "2"}]}
    lin = lineages()[1]
    card = model_card({**lin, "training": {"trained": False, "reason": "resft_dataset v2 has no rows"}})
    assert "resft" in card and "sft/sftv" in card and "no rows" in card


# ---------------------------------------------------------------- the train-side rule


def test_problem_sides_by_key_then_by_text():
    leak = pl.DataFrame({"problem_id": ["p1", "p2", "p3", "q_x"], "query": ["Red kettle", "Blue mug", "Green hat", "A B"],
                         "leak_cluster_id": ["c1", "c2", "c3", "c4"], "side": ["train", "heldout", "excluded", "train"]})
    rows_ = pl.DataFrame({"problem_id": ["p1", "zz", "p3", None, "new"],
                          "query": ["Red kettle", "blue  MUG!", "Green hat", "A B", "never seen"]})
    sided = problem_sides(rows_, leak)
    assert sided["side"].to_list() == ["train", "heldout", "excluded", "train", "unknown"]
    bad = not_train_side(pl.concat([rows_, rows_]), leak)
    assert sorted(bad["side"].to_list()) == ["excluded", "heldout", "unknown"]


def test_train_side_truths_are_train_side_suite_problems_once_each():
    """What train_problems writes and the arena base's recommend phase plays: suite problems found
    for train-side leak rows, by key or by text, one per suite problem, never a held-out one."""
    from shopdistill_assets.sandbox.problems import Problem
    from shopdistill_assets.split.heldout import GroundTruth

    def problem(pid, query):
        return Problem.from_dict({"problem_id": pid, "query": query, "category": "Product",
                                  "reward": {"product_id": "1", "shop_id": "1"}})

    truth = GroundTruth([problem("s1", "Red kettle"), problem("s2", "Blue mug"), problem("s3", "Green hat")])
    leak = pl.DataFrame({"problem_id": ["s1", "x9", "s2", "k7", "zz"],
                         "query": ["Red kettle", "red  KETTLE!", "Blue mug", "Green hat", "never a suite problem"],
                         "leak_cluster_id": ["c1", "c1", "c2", "c3", "c4"],
                         "side": ["train", "train", "heldout", "train", "train"],
                         "first_day": ["2026-11-01"] * 5})
    matched = train_side_truths(leak, truth)
    assert [(t.problem_id, key, cluster) for t, key, cluster, _ in matched] == [("s1", "s1", "c1"), ("s3", "k7", "c3")]
    # a split whose key and text disagree: s1's own key is held out, a train-side row has its exact text;
    # s3 is found by text, and no row under its own key says otherwise
    disagree = pl.DataFrame({"problem_id": ["s1", "x9", "k7"], "query": ["Crimson kettle", "Red kettle", "Green hat"],
                             "leak_cluster_id": ["c1", "c9", "c3"], "side": ["heldout", "train", "train"],
                             "first_day": ["2026-11-01"] * 3})
    assert [t.problem_id for t, *_ in train_side_truths(disagree, truth)] == ["s3"]
    assert not_train_side(pl.DataFrame({"problem_id": ["s1"], "query": ["Red kettle"]}), disagree)["side"].to_list() \
        == ["heldout"]


HELM_POD_SPEC = json.dumps({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}})


def test_the_gpu_pod_spec_and_command_are_built_by_configuration():
    """SHOPDISTILL_GPU_POD_SPEC picks the Kubernetes launcher; the pod Dagster Pipes would create
    is built with dagster-k8s's own builder and the kubernetes models (no cluster)."""
    from dagster_k8s.pipes import build_pod_body

    from resources.launcher import deepspeed_config
    from shopdistill_assets.training.launch import launcher_from_env

    assert launcher_from_env({}).kind == "local"
    launcher = launcher_from_env({"SHOPDISTILL_GPU_POD_SPEC": HELM_POD_SPEC, "SHOPDISTILL_TRAIN_IMAGE": "train:abc",
                                  "SHOPDISTILL_DEEPSPEED": "zero3", "SHOPDISTILL_MODEL_CACHE_CLAIM": "hf-cache"})
    assert (launcher.kind, launcher.image, launcher.deepspeed_config, launcher.remote) == ("k8s", "train:abc", "zero3",
                                                                                           True)
    spec, command = launcher.pod("sft.py", "s3://models/ckpt/.runs/sft/r1/r1.yaml")
    assert command == ["deepspeed", "--num_gpus", "8", "--num_nodes", "1", "--master_port", "29500",
                       "/app/shopdistill_assets/training/stages/sft.py", "--config", "s3://models/ckpt/.runs/sft/r1/r1.yaml"]
    pod = build_pod_body("train-1", launcher.image, command, {"DAGSTER_PIPES_CONTEXT": "x"}, None, spec)
    container = pod.spec.containers[0]
    assert pod.spec.restart_policy == "Never" and container.image == "train:abc" and container.command == command
    assert container.resources.limits["nvidia.com/gpu"] == container.resources.requests["nvidia.com/gpu"] == "8"
    assert container.resources.requests["cpu"] == "64" and container.resources.requests["memory"] == "768Gi"
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod.spec.tolerations[0].key == "nvidia.com/gpu" and pod.spec.tolerations[0].effect == "NoSchedule"
    mounts = {m.name: m.mount_path for m in container.volume_mounts}
    assert mounts == {"dshm": "/dev/shm", "cache": "/cache"}
    volumes = {v.name: v for v in pod.spec.volumes}
    assert volumes["dshm"].empty_dir.medium == "Memory"
    assert volumes["cache"].persistent_volume_claim.claim_name == "hf-cache"
    env = {e.name: e.value for e in container.env}
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["DAGSTER_PIPES_CONTEXT"] == "x"  # the bootstrap Pipes adds, beside ours
    # the stage config is a reference, not a value: no environment string grows with lineage
    assert all(len(e.value or "") < 200 for e in container.env)
    for name, stage in (("zero2", 2), ("zero3", 3)):
        found, config = deepspeed_config(name)
        assert found == name and config["zero_optimization"]["stage"] == stage
    assert deepspeed_config("zero3")[1]["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
    with pytest.raises(FileNotFoundError, match="zero2, zero3 or a JSON file"):
        deepspeed_config("zero9")
    with pytest.raises(ValueError, match="JSON object"):
        launcher_from_env({"SHOPDISTILL_GPU_POD_SPEC": "[1]"})


def test_a_pipes_message_is_read_only_once_its_line_is_whole():
    """A stage's report (its loss curve inlined as a PNG) is one long line the job appends while the
    launcher tails the file: read half-written, Dagster's reader thread died on the JSON and the
    stage's checkpoint was lost. The launcher's reader, through the interface Pipes calls
    (`read_messages` gives the job its path; leaving it joins the reader), hands on each message
    whole, and at the end a last line the writer left without its newline."""
    import threading
    import time

    from resources.launcher import WholeLineMessageReader

    class Handler:  # what Pipes' message handler is asked to do
        def __init__(self) -> None:
            self.messages, self.errors = [], []

        def handle_message(self, message: dict) -> None:
            self.messages.append(message)

        def report_pipes_framework_exception(self, origin: str, exc_info: object) -> None:
            self.errors.append(origin)

    report = json.dumps({"method": "report_asset_materialization", "params": {"png": "x" * 200_000}}) + "\n"
    pieces, handler = [report[i:i + 7_000] for i in range(0, len(report), 7_000)], Handler()

    def write(path: str) -> None:
        with open(path, "a", encoding="utf-8") as f:
            for piece in [*pieces, '{"method": "closed"}']:  # the writer ends mid-line
                f.write(piece)
                f.flush()
                time.sleep(0.003)

    with WholeLineMessageReader().read_messages(handler) as params:
        writer = threading.Thread(target=write, args=(params["path"],))
        writer.start()
        writer.join()
    assert handler.errors == []
    assert handler.messages == [json.loads(report), {"method": "closed"}]


def test_a_k8s_launcher_takes_the_k8s_path_and_says_what_it_lacks(tmp_path):
    """launch() on kind k8s reaches the pod client's own checks (a method once fell out of the class
    when a module-level helper was inserted between two of its methods)."""
    from resources.launcher import TrainingLauncher

    with pytest.raises(ValueError, match="needs `image`"):
        TrainingLauncher(kind="k8s").launch(None, "sft", "s3://bucket/config.json", str(tmp_path))


def test_a_pod_gets_the_catalogue_as_an_s3_uri(moto_s3, tmp_path, monkeypatch):
    """dr_grpo's sandbox catalogue is a folder here; a GPU pod gets it uploaded to the store
    (content-addressed, once) as an s3:// URI it fetches itself, never this machine's path."""
    import boto3

    from resources.launcher import TrainingLauncher
    from shopdistill_assets.sandbox import write_catalog
    from shopdistill_assets.sim.toy_world import toy_world
    from shopdistill_assets.training.assets import stage_extras
    from shopdistill_assets.training.stages import STAGES

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path))
    write_catalog(toy_world(seed=1, n_problems=3)[0], tmp_path / "arena" / "catalog" / "documents.jsonl.gz")
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="models")
    store = CheckpointStore("s3://models/ckpt", endpoint_url=moto_s3)
    pod = TrainingLauncher(kind="k8s", pod_spec_json=HELM_POD_SPEC, image="train:1")
    uri = stage_extras(STAGES["dr_grpo"], store, pod)["catalog"]
    assert uri.startswith("s3://models/ckpt/.runs/catalog/") and store.exists(f"{uri}/documents.jsonl.gz")
    assert stage_extras(STAGES["dr_grpo"], store, pod)["catalog"] == uri  # the same content: uploaded once
    local = TrainingLauncher(work_dir=str(tmp_path / "runs"))
    assert stage_extras(STAGES["dr_grpo"], store, local) == {"catalog": str(tmp_path / "arena" / "catalog")}
    assert stage_extras(STAGES["kto"], store, pod) == {}


def test_one_stage_registry_names_script_config_and_dataset():
    from shopdistill_assets.training.stages import METHODS, STAGES

    train_dir = Path(__file__).resolve().parents[1] / "shopdistill_assets" / "training" / "stages"
    for stage in STAGES.values():
        assert (train_dir / stage.script).is_file() and stage.config_class.endswith("Config")
    assert {s.method for s in STAGES.values()} == set(METHODS)
    assert [s.dataset for s in STAGES.values() if s.method == "sft"] == ["train_corpus", "resft_dataset",
                                                                          "teacher_sft_dataset"]


def test_a_local_job_builds_deepspeed_ops_in_its_own_environment(monkeypatch):
    """DeepSpeed JIT-builds an op keyed by name only under ~/.cache; two virtual environments
    sharing that folder rebuild it in turn on every launch. A job's default is one folder per
    environment; a user's own TORCH_EXTENSIONS_DIR and OMP_NUM_THREADS win."""
    import sys

    from resources.launcher import local_job_env

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = local_job_env()
    ours = Path(env["TORCH_EXTENSIONS_DIR"])
    assert ours.parent.name == "torch_extensions" and ours.name.startswith(Path(sys.prefix).resolve().name.lstrip(".") + "-")
    monkeypatch.setattr(sys, "prefix", "/some/other/venv")  # another environment: another folder
    other = Path(local_job_env()["TORCH_EXTENSIONS_DIR"])
    assert other.parent == ours.parent and other != ours
    assert int(env["OMP_NUM_THREADS"]) >= 1 and env["PYTHONUNBUFFERED"] == "1"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/elsewhere")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert (local_job_env()["TORCH_EXTENSIONS_DIR"], local_job_env()["OMP_NUM_THREADS"]) == ("/elsewhere", "3")


# ---------------------------------------------------------------- lengths, batches, FLOPs


def test_the_length_rule_is_the_format_gates():
    from shopdistill_assets.corpus.gates import GateConfig
    from shopdistill_assets.training.stages.common import MAX_TOKENS, StageArgs
    from shopdistill_assets.training.stages.kto import DEFAULTS as KTO
    from shopdistill_assets.training.stages.sft import DEFAULTS as SFT

    assert MAX_TOKENS == GateConfig.max_tokens == 14336
    assert SFT["max_length"] == KTO["max_length"] == StageArgs().max_tokens == MAX_TOKENS


def test_sft_rows_over_the_limit_are_dropped_or_keep_their_end():
    from datasets import Dataset

    from shopdistill_assets.training.stages.sft import fit_length

    rows = Dataset.from_dict({"input_ids": [[1, 2, 3], list(range(10, 20))],
                              "assistant_masks": [[0, 1, 1], [0] * 6 + [1] * 4]})
    kept, dropped, cut = fit_length(rows, 5, "drop")
    assert (len(kept), dropped, cut) == (1, 1, 0) and kept["input_ids"] == [[1, 2, 3]]
    ended, dropped, cut = fit_length(rows, 5, "keep_end")
    assert (dropped, cut) == (0, 1)
    assert ended["input_ids"][1] == [15, 16, 17, 18, 19] and ended["assistant_masks"][1] == [0, 1, 1, 1, 1]
    with pytest.raises(SystemExit, match="too_long"):
        fit_length(rows, 5, "keep_start")


def test_kto_shuffle_mixes_the_labels_of_every_batch():
    import random

    from shopdistill_assets.training.stages.kto import label_mix

    as_written = [True] * 154 + [False] * 154  # one label block at a time, as kto_dataset writes
    assert label_mix(as_written, 8)["batches_with_both_labels"] == 1  # only the batch across the boundary
    shuffled = as_written[:]
    random.Random(0).shuffle(shuffled)
    mix = label_mix(shuffled, 8)
    assert mix["batches"] == 39 and mix["batches_with_both_labels"] >= 36


def test_completion_budget_follows_the_teachers_turns():
    from shopdistill_assets.training.stages.dr_grpo import completion_budget

    turns = [100] * 90 + [400] * 10
    assert completion_budget(turns, 0.95, 14336) == 512  # 400 * 1.25 -> 512 (multiples of 32)
    assert completion_budget([40], 0.95, 14336) == 64 and completion_budget([], 0.95, 14336) == 1024
    assert completion_budget([20000], 0.95, 14336) == 7168  # at most half the length rule


def test_flops_per_token_counts_attention():
    from shopdistill_assets.training.stages.common import flops_per_token

    n = 4_022_468_096  # Qwen3-4B
    assert flops_per_token(n, 36, 2560, 0) == 6 * n
    assert flops_per_token(n, 36, 2560, 16384) == pytest.approx(6 * n + 12 * 36 * 2560 * 16384)
    assert flops_per_token(n, 36, 2560, 16384) / (6 * n) == pytest.approx(1.75, abs=0.01)


def test_grpo_prompts_are_rendered_with_the_tools_sft_trains_with(tmp_path):
    from transformers import AutoTokenizer

    from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS
    from shopdistill_assets.training.stages.dr_grpo import render_prompt
    from shopdistill_assets.training.tiny_model import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "m"))
    tools = json.dumps(list(TOOL_SCHEMAS.values()) if isinstance(TOOL_SCHEMAS, dict) else TOOL_SCHEMAS)
    (sft,) = rows.sft_rows([{**TRACE, "tools": tools}], "corpus")
    grpo = list(rows.grpo_rows([{**TRACE, "tools": tools}], "teacher"))
    whole = tokenizer.apply_chat_template(sft["messages"], tools=json.loads(tools), tokenize=False)
    for row in grpo:
        prompt = render_prompt(tokenizer, row["prompt"], row["tools"])
        assert "find_product" in prompt and "recommend_product" in prompt  # the schemas are in the context
        assert whole.startswith(prompt.rsplit("<|im_start|>assistant", 1)[0])  # the context SFT trained on


def test_a_tool_call_survives_the_decode_grpo_rewards(tmp_path):
    """TRL's GRPO trainer decodes completions with skip_special_tokens=True before the reward
    functions see them; as in Qwen3's tokenizer, the tiny models' tool-call and think markers are
    text, not control tokens, so a well-formed call still scores (with them special, every reward
    was 0 and Dr. GRPO left the model as it found it)."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from shopdistill_assets.training.stages.rewards import format_reward, tool_match_reward
    from shopdistill_assets.training.tiny_model import (MARKUP_TOKENS, build_small_model, build_tiny_model,
                                                        markup_as_text)

    turn = ('<think>\nsearch first\n</think>\n\n<tool_call>\n{"name": "find_product", "arguments": {"q": "tefal pan"}}'
            '\n</tool_call><|im_end|>')
    for path in (build_tiny_model(tmp_path / "tiny"),
                 build_small_model(tmp_path / "small", [turn] * 4, size="h128l4", vocab_size=600, identity=True)):
        tokenizer = AutoTokenizer.from_pretrained(path)
        (completion,) = tokenizer.batch_decode([tokenizer(turn, add_special_tokens=False)["input_ids"]],
                                               skip_special_tokens=True)
        assert "<|im_end|>" not in completion and all(tokenizer.convert_tokens_to_ids(m) != tokenizer.unk_token_id
                                                       for m in MARKUP_TOKENS)
        assert format_reward([completion]) == [1.0]
        assert tool_match_reward([completion], ["find_product"], ['{"q": "tefal pan"}']) == [1.0]

    # a base saved before: the markers special; markup_as_text re-saves it as text, ids unchanged
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.add_special_tokens(list(MARKUP_TOKENS))
    old = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=list(MARKUP_TOKENS))
    old.chat_template = tokenizer.chat_template
    old.save_pretrained(tmp_path / "old")
    ids = old(turn, add_special_tokens=False)["input_ids"]
    assert "<tool_call>" not in old.decode(ids, skip_special_tokens=True)
    assert markup_as_text(tmp_path / "old") and not markup_as_text(tmp_path / "old")  # once
    migrated = AutoTokenizer.from_pretrained(tmp_path / "old")
    assert migrated(turn, add_special_tokens=False)["input_ids"] == ids and migrated.chat_template == old.chat_template
    assert format_reward(migrated.batch_decode([ids], skip_special_tokens=True)) == [1.0]


def test_report_and_loss_curve_render_inline_with_baselines_and_sample_sizes():
    import base64

    from shopdistill_assets.training.report import curve_markdown, png_markdown, stages_figure, stages_table

    def row(policy, asr, problems=30, episodes=120):  # a policy_eval summary counts episodes as "samples"
        return {"policy": policy, "checkpoint": "", "asr": asr, "pass_at_1": asr, "pass_at_k": {"4": asr},
                "problems": problems, "samples": episodes}

    rows_ = [row("base", 0.1), row("sft", 0.3), row("random", 0.02), row("oracle", 1.0, episodes=30)]
    fig = stages_figure(rows_)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "random ASR (n=30x4)" in labels and "oracle ASR (n=30x1)" in labels
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["base\nn=30x4", "sft\nn=30x4"]
    markdown = png_markdown(fig, "report")
    assert base64.b64decode(markdown.split("base64,", 1)[1].rstrip(")"))[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| episodes |" in stages_table(rows_).splitlines()[0]
    # the distillation report's rows: ASR with its interval as error bars, and the step match beside it
    rows_ = [{**row("base", 0.0), "asr_interval": [0.0, 0.114], "step_match": 0.094},
             {**row("sft", 0.3), "asr_interval": [0.17, 0.48], "step_match": 0.668}]
    ax = stages_figure(rows_).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ASR (95 % interval)", "pass@4", "step match"]
    bars = sorted((p.get_x(), round(p.get_height(), 1)) for p in ax.patches)
    assert [h for _, h in bars] == [0.0, 0.0, 9.4, 30.0, 30.0, 66.8]
    caps = [line for c in ax.containers if getattr(c, "has_yerr", False) for line in c.lines[1]]
    assert caps and max(max(line.get_ydata()) for line in caps) == pytest.approx(48.0)
    curve = curve_markdown("sft", [[1, 2.5], [2, 2.0], [3, 1.5]])
    assert "data:image/png;base64," in curve and "loss 2.5000 -> 1.5000" in curve


def test_the_checkpoint_carries_the_template_it_was_trained_with(tmp_path):
    """Qwen3's own template drops an earlier turn's think block at serving, while TRL trains with
    its prefix-preserving template (every turn alike, empty <think></think> included). The
    checkpoint takes the training template, so serving renders a dialogue's history exactly as
    SFT trained it."""
    from pathlib import Path as P

    import trl
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    from shopdistill_assets.training.stages.common import adopt_training_template
    from shopdistill_assets.training.tiny_model import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "m"))
    tokenizer.chat_template = (P(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    (sft,) = rows.sft_rows([TRACE], "corpus")
    messages = sft["messages"]  # the second assistant turn has no reasoning
    history = messages[:4] + [{**messages[4], "reasoning_content": None}, messages[5]]

    def prefix_preserving(tok) -> bool:  # every prefix a served request could hold renders as trained
        whole = tok.apply_chat_template(history, tokenize=False)
        return all(whole.startswith(tok.apply_chat_template(history[:cut], tokenize=False))
                   for cut in range(2, len(history) + 1))

    class Trainer:  # what SFTTrainer holds after init: the template it trains with
        chat_template = get_training_chat_template(tokenizer)

    assert Trainer.chat_template and not prefix_preserving(tokenizer)  # Qwen3's own template disagrees
    assert adopt_training_template(Trainer(), tokenizer) == "training"
    assert tokenizer.chat_template == Trainer.chat_template and prefix_preserving(tokenizer)
    tokenizer.save_pretrained(tmp_path / "saved")  # as the checkpoint has it: the tool-call parser survives
    saved = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert saved.chat_template == Trainer.chat_template
    assert getattr(saved, "response_template", None) or getattr(saved, "response_schema", None)

    class Plain:
        chat_template = None

    assert adopt_training_template(Plain(), tokenizer) == "original"


def test_the_definitions_pick_the_gpu_pod_launcher_by_configuration(monkeypatch, tmp_path):
    from shopdistill_assets.definitions import build_definitions

    monkeypatch.setenv("SHOPDISTILL_HOME", str(tmp_path))
    monkeypatch.delenv("SHOPDISTILL_GPU_POD_SPEC", raising=False)
    assert build_definitions().resources["launcher"].kind == "local"
    monkeypatch.setenv("SHOPDISTILL_GPU_POD_SPEC", HELM_POD_SPEC)
    monkeypatch.setenv("SHOPDISTILL_TRAIN_IMAGE", "train:1")
    launcher = build_definitions().resources["launcher"]
    assert (launcher.kind, launcher.image, launcher.pod("kto.py", "s3://b/c.yaml")[1][2]) == ("k8s", "train:1", "8")
    # every job that takes a GPU node queues in the `gpu` pool (the instance bounds it)
    from shopdistill_assets.training.assets import CHECKPOINT_ASSETS
    from shopdistill_assets.training.data_assets import train_rollouts

    assert {a.op.pool for a in [*CHECKPOINT_ASSETS, train_rollouts]} == {"gpu"}
