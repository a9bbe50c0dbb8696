"""The training stages' plain parts: rows for TRL, rewards, the checkpoint store, lineage queries,
the train-side rule, the launcher's pod spec. No trainer runs here (test_training.py does that)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from shopdistill_assets.core.checkpoint_store import (
    LINEAGE_FILE,
    CheckpointNotFound,
    CheckpointStore,
    content_sha256,
)
from shopdistill_assets.core.lineage import chain, merge_files, model_card, uses_of_day
from shopdistill_assets.core.train_side import not_train_side, problem_sides
from shopdistill_assets.train import rows
from shopdistill_assets.train.kto import class_weights
from shopdistill_assets.train.rewards import completion_calls, format_score, tool_match_score

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
    out = rows.with_structured_messages(table)
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
    from shopdistill_assets.eval.toy_world import toy_world
    from shopdistill_assets.train.rewards import ShoppingEnvironment

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


def test_training_pod_spec_asks_for_gpus():
    from resources.launcher import deepspeed_config, training_pod_spec

    spec = training_pod_spec(gpus=8, node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"})
    container = spec["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8" and spec["restart_policy"] == "Never"
    assert spec["node_selector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["volumes"][0]["empty_dir"]["medium"] == "Memory"
    for name, stage in (("zero2", 2), ("zero3", 3)):
        found, config = deepspeed_config(name)
        assert found == name and config["zero_optimization"]["stage"] == stage
    assert deepspeed_config("zero3")[1]["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]
    with pytest.raises(FileNotFoundError, match="zero2, zero3 or a JSON file"):
        deepspeed_config("zero9")


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
