"""Dialect readers and the normalizer: samples, every normalize-level reason, hostile input, dedupe."""

from __future__ import annotations

import copy
import gzip
from pathlib import Path

import orjson
import pytest

from shopdistill_assets.corpus.dialects import (
    CANONICAL_COLUMNS,
    OPENAI,
    ORO_ENVELOPE,
    ORO_EPISODE,
    ORO_UPLOAD,
    PRIMARY,
    ROLLOUT,
    SYSTEM_PROMPT,
    TOOL_SCHEMAS,
    detect_dialect,
    make_trace_id,
    parse_updated_at,
    reasoning_coef,
)
from shopdistill_assets.corpus.normalize import (
    LEDGER_COLUMNS,
    RAW_LINE_LIMIT,
    dedupe_within_day,
    iter_records,
    normalize_lines,
    normalize_record,
)
from shopdistill_assets.corpus.reasons import REASONS, Reason

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
DAY = "2026-11-30"


@pytest.fixture(scope="module")
def day_lines() -> list[bytes]:
    if not SAMPLES.is_dir():
        pytest.skip("shared samples absent")
    return gzip.decompress((SAMPLES / "sn15-day.jsonl.gz").read_bytes()).splitlines()


@pytest.fixture(scope="module")
def rollout() -> list:
    if not SAMPLES.is_dir():
        pytest.skip("shared samples absent")
    return orjson.loads((SAMPLES / "shoppingbench-rollout.json").read_bytes())


@pytest.fixture(scope="module")
def openai_record() -> dict:
    if not SAMPLES.is_dir():
        pytest.skip("shared samples absent")
    return orjson.loads((SAMPLES / "openai-messages.jsonl").read_bytes())


def _one(obj) -> dict:
    """Normalize one record through the line path; returns the trace or the ledger row."""
    raw = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    [(kind, row)] = list(iter_records([("f.jsonl", 1, raw)], DAY))
    return row


def _reason(obj) -> str | None:
    return _one(obj).get("reason")


# ---- the samples ----------------------------------------------------------------------------


def test_sample_day_fates(day_lines):
    rows, rejected = normalize_lines([("f.jsonl.gz", i, raw) for i, raw in enumerate(day_lines, 1)], DAY)
    assert [r["source_line"] for r in rows] == [1, 2, 3, 4, 5]
    assert [(r["source_line"], r["stage"], r["reason"]) for r in rejected] == [
        (6, "normalize", "failed_run"), (7, "read", "json_decode"),  # status FAILED, no dialogue
    ]
    assert [(r["n_steps"], r["n_tool_calls"]) for r in rows] == [(4, 4), (4, 4), (3, 3), (4, 4), (5, 5)]
    assert all(set(r) == set(CANONICAL_COLUMNS) and r["dialect"] == PRIMARY for r in rows)
    # the FAILED run keeps its ids in the ledger; the cut-off line keeps its raw text
    assert rejected[0]["eval_run_id"] == "b14166de-8dc9-5c53-b38e-03c113f0f428"
    assert rejected[0]["trace_id"] == make_trace_id(rejected[0]["eval_run_id"], rejected[0]["problem_id"])
    assert rejected[1]["raw_line"].startswith('{"schema": "sn15.problem_run/v1", "eval_run_id": "cut-off')
    assert all(set(r) == set(LEDGER_COLUMNS) for r in rejected)


def test_primary_conversion(day_lines):
    row = _one(day_lines[0])
    assert row["trace_id"] == make_trace_id("34cdb085-c862-5a21-abdd-939b7ffa55c3", "d2121606-c995-5788-a5fc-3989cdfc11b8")
    assert row["trace_id"].startswith("t_") and len(row["trace_id"]) == 18
    assert (row["race_id"], row["suite_id"], row["phase"], row["category"]) == (412, 3, "RACE", "Product")
    assert (row["score"], row["reasoning_score"], row["reasoning_coef"]) == (1.0, 0.9, 1.0)
    assert row["updated_at"] == "2026-11-30T12:00:00Z"
    msgs = orjson.loads(row["messages"])
    assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "tool"] * 4
    assert msgs[0]["content"] == SYSTEM_PROMPT
    assert msgs[1]["content"] == "Find a hosport brand waist bag priced between 180 and 505 PHP."
    first = msgs[2]
    assert first["reasoning_content"].startswith("The user wants Find a hosport") and first["content"] == ""
    [call] = first["tool_calls"]
    assert call == {"id": "qTjpICjY", "type": "function",
                    "function": {"name": "find_product", "arguments": '{"q":"Find a hosport brand waist","page":1}'}}
    assert msgs[3]["tool_call_id"] == "qTjpICjY"
    assert orjson.loads(msgs[3]["content"])[0]["product_id"] == "5035687794"
    assert msgs[7]["content"] == '"Recommended."'  # strings stay JSON strings
    tools = [t["function"]["name"] for t in orjson.loads(row["tools"])]
    assert tools == ["find_product", "view_product_information", "recommend_product", "terminate"]
    ev = orjson.loads(row["proxy_evidence"])
    assert [(len(s["inference"]), len(s["search"])) for s in ev["steps"]] == [(1, 1), (1, 1), (1, 0), (1, 0)]
    assert ev["steps"][0]["inference"][0]["completion_tokens"] == 160
    assert ev["steps"][0]["inference"][0]["emits_tool_call"] is True
    assert ev["steps"][1]["inference"][0] == {"ts": 1764500011000, "max_tokens": 2048, "response_length": 2810}
    assert ev["steps"][1]["search"] == ["/search/view_product"]


def test_subtask_evidence_hangs_on_step0(day_lines):
    ev = orjson.loads(_one(day_lines[2])["proxy_evidence"])
    assert [(len(s["inference"]), len(s["search"])) for s in ev["steps"]] == [(3, 11), (0, 0), (0, 0)]
    assert [(c["max_tokens"], c["content"]) for c in ev["steps"][0]["inference"]] == [(4, "0"), (4, "1"), (4, "0")]


def test_rollout_sample(rollout):
    assert detect_dialect(rollout) == ROLLOUT
    row = _one(rollout)
    assert row["dialect"] == ROLLOUT and row["trace_id"].startswith("t_")
    assert row["eval_run_id"] is None and row["reasoning_score"] is None and row["proxy_evidence"] is None
    msgs = orjson.loads(row["messages"])
    # results come from the next prompt's <obs>; the final terminate's result is unknown
    assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert msgs[0]["content"] == "You are a shopping assistant. Use tools inside <tool_call></tool_call>."
    assert orjson.loads(msgs[3]["content"])[1]["price"] == 210.0
    assert orjson.loads(msgs[5]["content"])[0]["attributes"] == {"brand": ["x"]}
    assert msgs[7] == {"role": "tool", "tool_call_id": "o9aDEgTz", "content": '"Recommended."'}
    assert msgs[8]["tool_calls"][0]["function"]["name"] == "terminate"
    assert _one(rollout)["trace_id"] == row["trace_id"]  # content-derived, deterministic


def test_rollout_upstream_obs_shape(rollout):
    """Upstream writes one <obs> per step holding [{tool_call_id, results}]."""
    steps = copy.deepcopy(rollout)
    steps[1]["prompt"][1]["content"] = '# Dialogue Records History\nUser: x\n<obs>[{"tool_call_id": "qTjpICjY", "results": [1, 2]}]</obs>'
    steps[2]["prompt"][1]["content"] = steps[1]["prompt"][1]["content"] + '\n<obs>[{"tool_call_id": "nope", "results": 3}]</obs>'
    msgs = orjson.loads(_one(steps)["messages"])
    assert msgs[3] == {"role": "tool", "tool_call_id": "qTjpICjY", "content": "[1,2]"}
    assert msgs[4]["role"] == "assistant" and msgs[5]["role"] == "assistant"  # unmatched id: no result


def test_openai_sample_passes_through(openai_record):
    assert detect_dialect(openai_record) == OPENAI
    row = _one(openai_record)
    assert row["trace_id"] == make_trace_id(OPENAI, "sft-000042")
    msgs = orjson.loads(row["messages"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert msgs[5]["content"] == "Recommended."
    assert msgs[6] == {"role": "assistant", "content": "I recommended the Philips 1.7L kettle.", "reasoning_content": ""}
    assert orjson.loads(row["tools"]) == openai_record["tools"]
    assert (row["n_steps"], row["n_tool_calls"]) == (3, 2)


def test_openai_think_split_and_default_tools(openai_record):
    rec = copy.deepcopy(openai_record)
    del rec["tools"], rec["id"]
    rec["messages"][2] = {**rec["messages"][2], "reasoning_content": None, "content": "<think>Search first.</think>"}
    row = _one(rec)
    msgs = orjson.loads(row["messages"])
    assert (msgs[2]["reasoning_content"], msgs[2]["content"]) == ("Search first.", "")
    assert [t["function"]["name"] for t in orjson.loads(row["tools"])] == ["find_product", "recommend_product"]
    assert orjson.loads(row["tools"])[0] == TOOL_SCHEMAS["find_product"]


def test_repeated_tool_call_ids_are_disambiguated(day_lines):
    rec = orjson.loads(day_lines[0])
    rec["dialogue"][1]["completion"]["message"]["tool_call"][0]["tool_call_id"] = "qTjpICjY"
    rec["dialogue"][2]["completion"]["message"]["tool_call"][0]["tool_call_id"] = "qTjpICjY"
    msgs = orjson.loads(_one(rec)["messages"])
    ids = [m["tool_calls"][0]["id"] for m in msgs if m["role"] == "assistant"]
    assert ids == ["qTjpICjY", "qTjpICjY_2", "qTjpICjY_3", "NR0gqQng"]
    assert [m["tool_call_id"] for m in msgs if m["role"] == "tool"] == ids


def test_think_fallbacks(day_lines):
    rec = orjson.loads(day_lines[0])
    del rec["dialogue"][0]["completion"]["message"]["think"]
    msgs = orjson.loads(_one(rec)["messages"])
    assert msgs[2]["reasoning_content"] == "The user wants Find a hosport brand waist. I will search the catalog first."
    rec["dialogue"][0]["completion"]["reasoning_content"] = "<think>from the field</think>"
    assert orjson.loads(_one(rec)["messages"])[2]["reasoning_content"] == "from the field"


@pytest.mark.parametrize(("given", "expected"), [
    ("2026-11-30T13:02:11Z", "2026-11-30T13:02:11Z"),
    ("2026-11-30T13:02:11+02:00", "2026-11-30T11:02:11Z"),
    ("2026-11-30T13:02:11.250Z", "2026-11-30T13:02:11.250000Z"),
    ("2026-11-30 13:02:11", "2026-11-30T13:02:11Z"),
    ("2026-13-40T00:00:00Z", None), ("yesterday", None), (1764500001, None), (None, None), ("9" * 100, None),
])
def test_updated_at(given, expected):
    assert parse_updated_at(given) == expected


def test_reasoning_coef():
    assert reasoning_coef(0.9) == 1.0 and reasoning_coef(0.8) == 1.0
    assert reasoning_coef(0.5) == pytest.approx(0.7375) and reasoning_coef(None) is None


@pytest.mark.parametrize(("obj", "expected"), [
    ({"schema": PRIMARY}, PRIMARY), ({"eval_run_id": "x", "dialogue": []}, PRIMARY),
    ([{"completion": {}, "prompt": []}], ROLLOUT), ({"messages": []}, OPENAI),
    # what ORO writes: the sandbox envelope, the bare upload (a failed run's is []), an episode
    ({"problem_id": "p", "status": "SUCCESS", "dialogue": []}, ORO_ENVELOPE), ([{"completion": {}}], ORO_UPLOAD),
    ([], ORO_UPLOAD), ({"schema_version": "oro.environment_episode.v1", "episode": {}}, ORO_EPISODE),
    ({"schema": "sn15.problem_run/v2", "messages": []}, None), ({}, None), ([1], None), ("x", None),
])
def test_detect_dialect(obj, expected):
    assert detect_dialect(obj) == expected


# ---- every normalize/read reason fires on a record built for it ------------------------------


def _mutated(day_lines, edit) -> dict:
    rec = orjson.loads(day_lines[0])
    edit(rec)
    return rec


def test_read_reasons():
    assert _reason(b"") == "empty_line"
    assert _reason(b"   \t") == "empty_line"
    assert _reason(b'{"a": 1') == "json_decode"
    assert _reason(b'{"a": "\xff\xfe"}') == "bad_encoding"
    for scalar in (b"5", b'"text"', b"null", b"true"):
        assert _reason(scalar) == "not_an_object"


def test_the_typed_decode_checks_what_it_skips(day_lines):
    """The primary record is decoded typed and its unread fields skipped; the skipped bytes
    are still checked: bad UTF-8, bad JSON and too-deep nesting there reject the line as the
    generic decode does. A number beyond orjson's range (a float overflow) in a field the
    pipeline never reads is the one thing skipped unjudged (Python's json, ORO's, reads it)."""
    rec = orjson.loads(day_lines[0])
    assert _one(day_lines[0]).get("reason") is None
    line = orjson.dumps({**rec, "unread": "@@"})
    assert _reason(line.replace(b'"@@"', b'"\xff\xfe"')) == "bad_encoding"
    assert _reason(line.replace(b'"@@"', b"[1,]")) == "json_decode"
    assert _reason(line.replace(b'"@@"', b"[" * 5000 + b"]" * 5000)) == "json_decode"
    big = line.replace(b'"@@"', b"1e400")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(big)
    assert _one(big).get("reason") is None and _one(big)["trace_id"] == _one(day_lines[0])["trace_id"]
    # An inference call's response is read (decoded with the record): an overflow there is the
    # line's JSON fault, as the generic decode says, not a reader failure.
    calls = [c for step in rec["dialogue"] for c in step["extra_info"]["proxy_calls"]]
    at = next(i for i, c in enumerate(calls) if c["path"].startswith("/inference"))
    calls[at]["response"]["usage"] = {"completion_tokens": "@@"}
    assert _reason(orjson.dumps(rec).replace(b'"@@"', b"1e400")) == "json_decode"


def test_raw_line_is_truncated_in_the_ledger():
    raw = b'{"schema": "sn15.problem_run/v1", "x": "' + b"a" * 200_000
    row = _one(raw)
    assert row["reason"] == "json_decode"
    assert len(row["raw_line"]) == RAW_LINE_LIMIT
    assert f"raw line {len(raw)} bytes" in row["detail"]


def test_normalize_reasons(day_lines):
    def reason(edit) -> str | None:
        return _reason(_mutated(day_lines, edit))

    assert reason(lambda r: r.update(schema="sn15.problem_run/v2")) == "unknown_dialect"
    assert _reason({"hello": "world"}) == "unknown_dialect"
    assert reason(lambda r: r.pop("eval_run_id")) == "dialect_violation"
    assert reason(lambda r: r["dialogue"].__setitem__(1, "step")) == "dialect_violation"
    assert reason(lambda r: r["dialogue"][0]["completion"]["message"]["tool_call"][0].pop("name")) == "dialect_violation"
    assert reason(lambda r: r["dialogue"][0].pop("completion")) == "dialect_violation"
    assert reason(lambda r: (r["problem"].pop("query"), r["dialogue"][0]["extra_info"].pop("query"))) == "missing_query"
    assert reason(lambda r: r.update(dialogue=None, status="TIMED_OUT")) == "failed_run"
    assert reason(lambda r: r.update(status="FAILED")) == "failed_run"  # whatever its dialogue holds
    assert reason(lambda r: r.update(status="SKIPPED")) == "failed_run"
    assert reason(lambda r: r.update(dialogue=[])) == "empty_dialogue"  # a SUCCESS run with no steps
    assert reason(lambda r: r.update(reasoning_score="high")) == "bad_field_type"
    assert reason(lambda r: r.update(score=1.5)) == "bad_field_type"
    assert reason(lambda r: r.update(status=3)) == "bad_field_type"
    assert reason(lambda r: r.update(dialogue={"0": {}})) == "bad_field_type"
    assert reason(lambda r: r.update(miner_hotkey="5" * 10_000)) == "bad_field_type"
    assert reason(lambda r: r["dialogue"][0]["completion"]["message"].update(think=["a"])) == "bad_field_type"
    # the query falls back to the first step's extra_info.query
    row = _one(_mutated(day_lines, lambda r: r["problem"].pop("query")))
    assert row["query"] == "Find a hosport brand waist bag priced between 180 and 505 PHP."


def test_rollout_and_openai_reasons(rollout, openai_record):
    assert _reason([rollout[0], 7]) == "dialect_violation"
    steps = copy.deepcopy(rollout)
    steps[0]["extra_info"].pop("query")
    assert _one(steps)["query"] == "Find a hosport brand waist bag priced between 180 and 505 PHP."
    steps[0]["prompt"] = []
    assert _reason(steps) == "missing_query"
    rec = copy.deepcopy(openai_record)
    rec["messages"][3]["role"] = "function"
    assert _reason(rec) == "dialect_violation"
    rec = copy.deepcopy(openai_record)
    rec["messages"] = [m for m in rec["messages"] if m["role"] != "user"]
    assert _reason(rec) == "missing_query"
    rec = copy.deepcopy(openai_record)
    rec["tools"] = "all of them"
    assert _reason(rec) == "dialect_violation"


def test_reader_bug_costs_one_ledger_row(monkeypatch, day_lines):
    from shopdistill_assets.corpus import dialects

    def broken(obj, **_):
        raise KeyError("boom")

    monkeypatch.setitem(dialects.DIALECTS, PRIMARY, dialects.Dialect(PRIMARY, dialects._is_primary, broken))
    rows, rejected = normalize_lines([("f", 1, day_lines[0]), ("f", 2, day_lines[1])], DAY)
    assert rows == [] and [r["reason"] for r in rejected] == ["reader_error", "reader_error"]


# ---- hostile input never raises ---------------------------------------------------------------

HOSTILE_VALUES = [None, 0, -1, 2**62, 1.5e300, True, "", "x", [], {}, [None], {"": None}, [[[]]]]


def _paths(obj, prefix=()):
    """Every key/index path inside obj."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,))


def _replace(obj, path, value):
    out = copy.deepcopy(obj)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return out


def _never_raises(record) -> int:
    """Normalize every one-field mutation of record; return how many became traces."""
    traces = 0
    for path in _paths(record):
        for value in HOSTILE_VALUES:
            out = normalize_record(_replace(record, path, value), day=DAY, source_file="f", source_line=1)
            if isinstance(out, dict):
                traces += 1
                assert isinstance(out["messages"], str) and isinstance(out["tools"], str)
            else:
                assert out.reason in REASONS and out.reason != Reason.READER_ERROR, (path, value, out)
    return traces


def test_hostile_primary_mutations(day_lines):
    assert _never_raises(orjson.loads(day_lines[0])) > 100


def test_hostile_rollout_and_openai_mutations(rollout, openai_record):
    assert _never_raises(rollout) > 100
    assert _never_raises(openai_record) > 20


# ---- what ORO writes before the join: the sandbox envelope, the bare upload, episodes ----------

ENVELOPE_KEYS = ("problem_id", "status", "execution_time", "inference_total", "inference_failure_count")


def _envelope(record: dict) -> dict:
    """The sandbox's output.jsonl line for a joined record (sandbox_executor's envelope shape)."""
    return {**{k: record.get(k) for k in ENVELOPE_KEYS}, "error": None, "dialogue": record["dialogue"]}


def test_envelope_and_upload_read_as_the_joined_record(day_lines):
    joined = orjson.loads(day_lines[0])
    primary = _one(joined)
    for obj, dialect in ((_envelope(joined), ORO_ENVELOPE), (joined["dialogue"], ORO_UPLOAD)):
        row = _one(obj)
        assert row["dialect"] == dialect and detect_dialect(obj) == dialect
        assert row["messages"] == primary["messages"] and row["tools"] == primary["tools"]
        assert row["proxy_evidence"] == primary["proxy_evidence"] and row["query"] == primary["query"]
        # no run identity and no judge score before the join: an id of its own, unjudged
        assert row["eval_run_id"] is None and row["reasoning_score"] is None and row["trace_id"] != primary["trace_id"]
        assert row["problem_id"] == joined["problem_id"]
    assert _one(_envelope(joined))["status"] == "SUCCESS"
    assert _one(joined["dialogue"])["trace_id"] == _one(list(joined["dialogue"]))["trace_id"]  # a re-upload is the same


def test_oro_shapes_reasons(day_lines):
    joined = orjson.loads(day_lines[0])
    assert _reason([]) == "failed_run"  # output_split writes [] for a run with no dialogue
    unpaired = copy.deepcopy(joined["dialogue"])
    unpaired[0]["completion"] = "x"
    assert _one(unpaired)["problem_id"] == joined["problem_id"]  # a rejected upload keeps its problem
    assert _reason({**_envelope(joined), "status": "FAILED", "dialogue": None}) == "failed_run"
    assert _reason({**_envelope(joined), "status": "TIMED_OUT"}) == "failed_run"
    assert _reason({**_envelope(joined), "dialogue": "x"}) == "bad_field_type"
    no_query = copy.deepcopy(joined["dialogue"])
    no_query[0]["extra_info"].pop("query")
    assert _reason(no_query) == "missing_query"
    episode = {"schema_version": "oro.environment_episode.v1", "episode": {"family": "TF5-ranking"}}
    row = _one(episode)
    assert (row["stage"], row["reason"]) == ("normalize", "environment_episode") and "TF5-ranking" in row["detail"]
    assert _never_raises(_envelope(joined)) > 100 and _never_raises(joined["dialogue"]) > 100


def test_judge_model_names_and_null_scores_are_read(day_lines):
    """Newer ORO: judge names like z-ai/glm-5.1, a null reasoning_score when the judge failed."""
    joined = orjson.loads(day_lines[0])
    assert _one({**joined, "reasoning_model": "z-ai/glm-5.1"})["reasoning_score"] == joined["reasoning_score"]
    row = _one({**joined, "reasoning_score": None, "reasoning_explanation": None})
    assert row["reasoning_score"] is None and row["reasoning_coef"] is None


def test_hostile_sizes_and_depth(day_lines):
    rec = orjson.loads(day_lines[0])
    big = "é" * 1_000_000
    for path in [("problem", "query"), ("dialogue", 0, "completion", "message", "think"),
                 ("dialogue", 0, "completion", "message", "tool_call", 0, "name"),
                 ("dialogue", 0, "completion", "message", "tool_call", 0, "result"),
                 ("dialogue", 0, "extra_info", "proxy_calls", 0, "path"), ("updated_at",), ("eval_run_id",)]:
        out = normalize_record(_replace(rec, path, big), day=DAY, source_file="f", source_line=1)
        assert isinstance(out, dict) or out.reason != Reason.READER_ERROR
    deep: list = []
    for _ in range(600):  # orjson reads 1024 levels but writes only 254
        deep = [deep]
    out = normalize_record(_replace(rec, ("dialogue", 0, "completion", "message", "tool_call", 0, "result"), deep),
                           day=DAY, source_file="f", source_line=1)
    assert out.reason == "dialect_violation"
    assert _reason(b"[" * 5000 + b"]" * 5000) == "json_decode"
    many = _replace(rec, ("dialogue", 0, "extra_info", "proxy_calls"), [{"path": "/search/find_product"}] * 5000 + [7])
    ev = orjson.loads(_one(many)["proxy_evidence"])
    assert sum(len(s["search"]) for s in ev["steps"]) == 256
    assert ev["dropped"] == 5001 + 4 - 256  # the first step fills the budget; 4 calls on later steps


# ---- dedupe ------------------------------------------------------------------------------------


def test_dedupe_keeps_latest(day_lines):
    rec = orjson.loads(day_lines[0])
    later = {**rec, "updated_at": "2026-11-30T18:00:00Z"}
    undated = {**rec, "updated_at": "not a time"}
    lines = [("a.jsonl.gz", 1, orjson.dumps(later)), ("a.jsonl.gz", 2, day_lines[0]),
             ("b.jsonl.gz", 1, orjson.dumps(undated)), ("b.jsonl.gz", 2, day_lines[1])]
    rows, _ = normalize_lines(lines, DAY)
    kept, superseded = dedupe_within_day(rows)
    assert [(r["source_file"], r["source_line"]) for r in kept] == [("a.jsonl.gz", 1), ("b.jsonl.gz", 2)]
    assert [(r["source_file"], r["source_line"], r["reason"], r["stage"]) for r in superseded] == [
        ("a.jsonl.gz", 2, "superseded", "dedupe"), ("b.jsonl.gz", 1, "superseded", "dedupe"),
    ]
    assert superseded[0]["detail"].startswith("superseded by a.jsonl.gz:1")
    assert superseded[0]["trace_id"] == kept[0]["trace_id"]


def test_dedupe_tie_goes_to_later_file_then_line(day_lines):
    lines = [("b.jsonl.gz", 1, day_lines[0]), ("a.jsonl.gz", 9, day_lines[0]), ("b.jsonl.gz", 3, day_lines[0])]
    kept, superseded = dedupe_within_day(normalize_lines(lines, DAY)[0])
    assert [(r["source_file"], r["source_line"]) for r in kept] == [("b.jsonl.gz", 3)]
    assert len(superseded) == 2
    kept2, _ = dedupe_within_day(normalize_lines(lines[::-1], DAY)[0])
    assert kept2 == kept  # the winner does not depend on input order


