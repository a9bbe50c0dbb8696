"""Structural filter, reasoning gate, format gate, token counting, reason table."""

from __future__ import annotations

import copy
import gzip
from collections import Counter
from pathlib import Path

import orjson
import pytest

from shopdistill_assets.core.tokens import count_tokens, estimate_tokens
from shopdistill_assets.corpus.check_funnel import take_back
from shopdistill_assets.corpus.decide import DecideConfig, decide_line
from shopdistill_assets.corpus.dialects import ROLLOUT
from shopdistill_assets.corpus.gates import (
    GateConfig,
    argument_error,
    format_gate,
    parse_product_ids,
    reasoning_gate,
    trace_tokens,
)
from shopdistill_assets.corpus.normalize import iter_records, ledger_row_for_trace
from shopdistill_assets.corpus.reasons import (
    REASON_STAGE,
    REASONS,
    Reason,
    reason_table,
    reasons_markdown,
    trace_checks,
)
from shopdistill_assets.corpus.structural import StructuralConfig, classify

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
DAY = "2026-11-30"


@pytest.fixture(scope="module")
def records() -> dict[str, object]:
    """The sample records, parsed: day lines 1-5 as "1".."5", plus "rollout" and "openai"."""
    if not SAMPLES.is_dir():
        pytest.skip("shared samples absent")
    lines = gzip.decompress((SAMPLES / "sn15-day.jsonl.gz").read_bytes()).splitlines()
    out: dict[str, object] = {str(i): orjson.loads(raw) for i, raw in enumerate(lines[:5], 1)}
    out["rollout"] = orjson.loads((SAMPLES / "shoppingbench-rollout.json").read_bytes())
    out["openai"] = orjson.loads((SAMPLES / "openai-messages.jsonl").read_bytes())
    return out


def trace(record) -> dict:
    [(kind, row)] = list(iter_records([("f.jsonl", 1, orjson.dumps(record))], DAY))
    assert kind == "trace", row
    return row


def edited(records, key, edit) -> dict:
    rec = copy.deepcopy(records[key])
    edit(rec)
    return trace(rec)


def msg(rec, step):
    return rec["dialogue"][step]["completion"]["message"]


def call(rec, step, k=0):
    return msg(rec, step)["tool_call"][k]


# ---- structural ----------------------------------------------------------------------------


def test_sample_labels(records):
    labels = {k: classify(trace(r)).label for k, r in records.items()}
    assert labels == {"1": "agentic", "2": "agentic", "3": "subtask", "4": "agentic", "5": "agentic",
                      "rollout": "agentic", "openai": "agentic"}


def _newer_proxy_log(record: dict) -> dict:
    """The record's proxy log as newer ORO writes it (src/agent/proxy_client.py after a6b1cf3):
    every call's retry attempts logged beside its summary (`kind: attempt`), catalogue calls
    dispatched as POSTs without `params`, inference requests carrying the prompt (`messages`),
    and responses whole."""
    rec = copy.deepcopy(record)
    for step in rec.get("dialogue") or []:
        calls = []
        for c in step.get("extra_info", {}).get("proxy_calls") or []:
            calls.append({"kind": "attempt", "method": c.get("method"), "path": c.get("path"),
                          "timestamp": c.get("timestamp"), "attempt": 0, "duration_ms": 1.0, "status_code": 200})
            if str(c.get("path", "")).startswith("/search/"):
                c = {k: v for k, v in c.items() if k not in ("params", "response_truncated", "response_length")}
                c["method"] = "POST"
            elif isinstance(c.get("json_data"), dict):
                c["json_data"] = {**c["json_data"], "messages": [{"role": "system", "content": "tools …"},
                                                                 {"role": "user", "content": "x" * 3000}]}
            calls.append(c)
        if calls:
            step["extra_info"]["proxy_calls"] = calls
    return rec


def test_structural_labels_hold_on_newer_proxy_logs(records, shared_dir):
    """Re-checked evidence: attempt entries are not calls, POST dispatches are catalogue calls."""
    lines = (shared_dir / "conformance" / "records" / "oro_problem_run.jsonl").read_bytes().splitlines()
    pool = [orjson.loads(raw) for raw in lines] + [records[str(i)] for i in range(1, 6)]
    labels = Counter()
    for rec in pool:
        if not rec.get("dialogue"):
            continue
        old, new = trace(rec), trace(_newer_proxy_log(rec))
        before, after = classify(old), classify(new)
        assert (after.label, after.reason) == (before.label, before.reason), rec.get("problem_id")
        assert orjson.loads(after.evidence_json()).get("counts") == orjson.loads(before.evidence_json()).get("counts")
        labels[after.label] += 1
    assert labels["agentic"] >= 25 and labels["subtask"] >= 3


def test_client_side_tools_are_not_catalogue_calls(shared_dir):
    """ORO's calculate_voucher runs in the agent (no proxy call): a voucher run's searches match
    its dialogue's catalogue calls exactly (conformance record 6, ORO's reference agent)."""
    raw = (shared_dir / "conformance" / "records" / "oro_problem_run.jsonl").read_bytes().splitlines()[5]
    row = trace(orjson.loads(raw))
    counts = orjson.loads(classify(row).evidence_json())["counts"]
    assert "calculate_voucher" in row["messages"]
    assert counts["search_calls"] == counts["dialogue_catalogue_calls"] == 1


def test_subtask_evidence(records):
    d = classify(trace(records["3"]))
    assert d.evidence["signals"] == {"hung_on_step0": 2, "search_excess": 2, "classify_calls": 2,
                                     "inference_per_step": -1, "terse_thinks": 1}
    assert d.evidence["score"] == 6
    assert d.evidence["counts"]["search_calls"] == 11 and d.evidence["counts"]["dialogue_catalogue_calls"] == 1
    assert orjson.loads(d.evidence_json()) == d.evidence
    agentic = classify(trace(records["1"]))
    assert agentic.evidence["signals"] == {"search_matches": -1, "emits_tool_call": -2, "inference_per_step": -1}
    assert classify(trace(records["3"]), StructuralConfig(subtask_threshold=7)).label == "agentic"


def test_dialects_without_proxy_log_say_why(records):
    d = classify(trace(records["rollout"]))
    assert d.evidence["basis"] == "dialect" and d.evidence["dialect"] == ROLLOUT and d.reason is None


def test_native_tools_count_as_agentic(records):
    def harness_with_native_tools(rec):
        for c in rec["dialogue"][0]["extra_info"]["proxy_calls"]:
            if "json_data" in c:
                c["json_data"]["tools"] = [{"type": "function"}]

    d = classify(edited(records, "3", harness_with_native_tools))
    assert d.evidence["signals"]["native_tools"] == -2 and d.evidence["score"] == 4


def test_no_tool_calls_and_unclear(records):
    def no_calls(rec):
        for step in rec["dialogue"]:
            step["completion"]["message"].pop("tool_call")

    d = classify(edited(records, "1", no_calls))
    assert (d.label, d.reason) == ("reject", "no_tool_calls")
    rej = d.rejection()
    assert (rej.stage, rej.reason) == ("structural", "no_tool_calls")
    only_text = copy.deepcopy(records["openai"])
    only_text["messages"] = only_text["messages"][:2] + [{"role": "assistant", "content": "Buy the kettle."}]
    assert classify(trace(only_text)).reason == "no_tool_calls"

    def no_proxy(rec):
        for step in rec["dialogue"]:
            step["extra_info"].pop("proxy_calls")

    row = edited(records, "1", no_proxy)
    assert (classify(row).label, classify(row).reason) == ("reject", "structural_unclear")
    assert classify(row, StructuralConfig(no_evidence_label="agentic")).label == "agentic"


def test_search_burst_without_inference_is_rejected_as_no_inference(records):
    def no_inference(rec):
        for step in rec["dialogue"]:
            calls = step["extra_info"].get("proxy_calls", [])
            step["extra_info"]["proxy_calls"] = [c for c in calls if c["path"].startswith("/search")]

    row = edited(records, "3", no_inference)
    d = classify(row)
    assert (d.label, d.reason) == ("reject", "no_inference") and d.evidence["counts"]["inference_calls"] == 0
    kept = classify(row, StructuralConfig(no_inference_label="subtask"))
    assert kept.label == "subtask" and kept.evidence["signals"]["no_inference"] == 2


# ---- reasoning gate ------------------------------------------------------------------------


def test_reasoning_gate(records):
    assert reasoning_gate(trace(records["1"])) is None
    assert reasoning_gate(trace(records["2"])) is None  # outcome 0, judge 0.7: still a corpus row
    rej = reasoning_gate(trace(records["4"]))
    assert (rej.stage, rej.reason) == ("reasoning_gate", "reasoning_gate")
    assert reasoning_gate(edited(records, "1", lambda r: r.update(reasoning_score=0.5))) is None
    assert reasoning_gate(edited(records, "1", lambda r: r.update(reasoning_score=0.49))).reason == "reasoning_gate"
    null = edited(records, "1", lambda r: r.update(reasoning_score=None))
    assert reasoning_gate(null).reason == "no_reasoning_score"
    assert reasoning_gate(null, GateConfig(null_reasoning_score_policy="keep")) is None
    for key in ("rollout", "openai"):
        assert reasoning_gate(trace(records[key])) is None
        assert reasoning_gate(trace(records[key]), GateConfig(missing_judge_policy="reject")).reason == "no_reasoning_score"
    assert reasoning_gate(trace(records["2"]), GateConfig(min_reasoning_score=0.8)).reason == "reasoning_gate"


# ---- format gate ---------------------------------------------------------------------------


def test_clean_samples_pass_format_gate(records):
    for key in ("1", "2", "3", "4", "rollout", "openai"):
        assert format_gate(trace(records[key])) is None, key
    assert format_gate(trace(records["5"])).reason == "recommend_count"


def fmt(records, key, edit) -> str | None:
    rej = format_gate(edited(records, key, edit))
    assert rej is None or rej.stage == "format_gate"
    return rej and rej.reason


def test_unknown_tool(records):
    assert fmt(records, "1", lambda r: call(r, 0).update(name="buy_now")) == "unknown_tool"


@pytest.mark.parametrize("params", [
    {"q": "bag", "page": True}, {"page": 1}, {"q": "bag", "page": 1, "color": "red"}, {"q": ["bag"]},
    {"q": "bag", "shop_id": {"id": 1}}, {"q": "bag", "page": "two"}, {"q": "bag", "page": 1.5},
    "not json", '["q", "page"]', None, 42,
])
def test_malformed_arguments(records, params):
    """Only what the real tool cannot take: not an object, a missing required or unknown
    parameter, a value of a type the tool does not take."""
    assert fmt(records, "1", lambda r: call(r, 0).update(parameters=params)) == "malformed_arguments"


@pytest.mark.parametrize("params", [
    # what ORO's agent and search server take (conformance D4): page defaults to 1, travels as
    # text, a numeric shop_id, services with spaces; values the server ignores are not rejects
    {"q": "bag"}, {"q": "bag", "page": "2"}, {"q": "bag", "page": 1, "shop_id": 4908479},
    {"q": "bag", "page": 1, "service": "official, COD"}, {"q": "bag", "page": 9}, {"q": "", "page": 1},
    {"q": "bag", "page": 1, "sort": "cheapest"}, {"q": "bag", "page": 1, "price": "cheap"},
    {"q": "bag", "page": 1, "service": "fast"}, {"q": 42},
    {"q": "bag", "page": 5, "price": "180-505", "sort": "priceasc", "service": "COD,freeShipping", "shop_id": None},
])
def test_arguments_the_real_tools_take(records, params):
    assert fmt(records, "1", lambda r: call(r, 0).update(parameters=params)) is None


def test_real_tool_signatures():
    assert argument_error("find_product", '{"q": "a", "page": 1, "x": 1}', allow_extra=True) is None
    assert argument_error("terminate", "{}") is None  # ORO's terminate defaults status to success
    # ORO's reference agent: calculate_voucher(product_prices, voucher_type, discount_value, threshold, budget, cap)
    oro = '{"product_prices": "342.5,120", "voucher_type": "fixed", "discount_value": 18, "threshold": 300, "budget": 500}'
    assert argument_error("calculate_voucher", oro) is None
    assert argument_error("calculate_voucher", oro.replace('"budget": 500', '"budget": "500"')) == "budget must be number, not str"
    assert "missing required product_prices" == argument_error(
        "calculate_voucher", '{"product_ids": "1,2", "voucher_type": "fixed", "discount_value": 1, "threshold": 0, "budget": 9}')
    assert argument_error("find_products_in_same_shop", '{"product_queries": [{"q": "mat"}]}') is None
    assert argument_error("check_product_match", '{"product_id": "1", "requirements": {"color": "red"}}') is None


def test_unpaired_tool_call(records):
    assert fmt(records, "1", lambda r: call(r, 1).pop("result")) == "unpaired_tool_call"
    # a final recommend without its result is unpaired; a final terminate alone is not
    assert fmt(records, "1", lambda r: call(r, 3).pop("result")) is None
    assert fmt(records, "1", lambda r: r["dialogue"].pop()) is None  # ends on the answered recommend
    row = edited(records, "1", lambda r: (r["dialogue"].pop(), call(r, 2).pop("result")))
    assert format_gate(row).reason == "unpaired_tool_call"

    def orphan_result(rec):
        rec["messages"][3]["tool_call_id"] = "call_9"

    assert fmt(records, "openai", orphan_result) == "unpaired_tool_call"

    def duplicate_ids(rec):
        rec["messages"][4]["tool_calls"][0]["id"] = "call_1"
        rec["messages"][5]["tool_call_id"] = "call_1"

    assert fmt(records, "openai", duplicate_ids) == "unpaired_tool_call"


def test_recommend_count(records):
    rej = format_gate(trace(records["5"]))
    assert (rej.reason, rej.detail) == ("recommend_count", "2 recommend_product calls")
    assert fmt(records, "1", lambda r: del_step(r, 2)) == "recommend_count"


def del_step(rec, i):
    del rec["dialogue"][i]


@pytest.mark.parametrize("ids", ["abc", "123,,456", "", " ", "12a", "٣٤٥", "1" * 21, "5035687794;5035600001"])
def test_bad_product_ids(records, ids):
    assert fmt(records, "1", lambda r: call(r, 2).update(parameters={"product_ids": ids})) == "bad_product_ids"


def test_parse_product_ids():
    assert parse_product_ids("5035687794, 5035600001 ") == ["5035687794", "5035600001"]
    assert parse_product_ids(5035687794) is None


def test_think_then_stop(records):
    stop = {"completion": {"content": "<think>Let me think more.</think>", "message": {"think": "Let me think more."}},
            "extra_info": {"step": 4}}
    assert fmt(records, "1", lambda r: r["dialogue"].append(stop)) == "think_then_stop"
    assert fmt(records, "1", lambda r: r["dialogue"].insert(1, stop)) == "think_then_stop"
    answer = {"completion": {"message": {"think": "Done.", "response": "I recommended 5035687794."}}}
    assert fmt(records, "1", lambda r: r["dialogue"].append(answer)) is None


def test_too_long(records):
    row = trace(records["1"])
    rej = format_gate(row, GateConfig(max_tokens=500))
    assert rej.reason == "too_long" and rej.detail.endswith("> 500")
    n = trace_tokens(orjson.loads(row["messages"]), row["tools"])
    assert 1000 < n < 2000
    assert fmt(records, "1", lambda r: msg(r, 1).update(think="word " * 12_000)) == "too_long"


@pytest.mark.parametrize("think", ["plain ASCII 123 ", "non-ASCII ₱ 12 \U0001f6d2 ", "99999 "])
def test_too_long_decides_as_the_full_count_at_every_limit(records, think):
    """A trace is counted only when its length cannot bound it under the limit: the verdict is
    the full count's at every limit around it, for ASCII text, multi-byte text and digits."""
    row = edited(records, "1", lambda r: msg(r, 1).update(think=think * 300))
    n = trace_tokens(orjson.loads(row["messages"]), row["tools"])
    chars = len("\n".join(p for m in orjson.loads(row["messages"]) for p in (m.get("content"), m.get("reasoning_content"))
                          if isinstance(p, str)))
    for limit in sorted({n - 1, n, n + 1, chars // 2, chars, chars * 4 // 3, chars * 2, 14336}):
        rejection = format_gate(row, GateConfig(max_tokens=limit))
        assert (rejection is not None and rejection.reason == "too_long") == (n > limit), (limit, n)
        if rejection is not None:
            assert rejection.detail == f"{n} tokens > {limit}"


def test_gate_rejection_becomes_ledger_row(records):
    row = trace(records["5"])
    ledger = ledger_row_for_trace(row, format_gate(row))
    assert (ledger["trace_id"], ledger["source_line"], ledger["stage"], ledger["reason"], ledger["raw_line"]) == (
        row["trace_id"], 1, "format_gate", "recommend_count", None)


def test_gates_never_raise_on_hostile_rows(records):
    row = trace(records["1"])
    for messages in ["", "null", "{}", "[1]", '[{"role": "assistant", "tool_calls": [{"id": 1}]}]',
                     '[{"role": "assistant", "tool_calls": "x"}]']:
        rej = format_gate({**row, "messages": messages})
        assert rej is not None and rej.reason in REASONS
    assert reasoning_gate({**row, "reasoning_score": "0.9"}).reason == "no_reasoning_score"
    assert classify({**row, "proxy_evidence": "{bad"}).reason == "structural_unclear"
    assert classify({**row, "messages": None}).reason == "no_tool_calls"


# ---- tokens and reasons --------------------------------------------------------------------


def test_token_estimate():
    assert estimate_tokens("") == 0
    assert estimate_tokens("5035687794") == 10  # digits one each
    assert estimate_tokens("abcdef") == 2
    english = "The first result costs little and its brand matches the request. " * 20
    assert estimate_tokens(english) >= len(english) / 4  # errs long on English prose
    assert count_tokens("abc def", None) == estimate_tokens("abc def")


def test_count_tokens_with_a_real_tokenizer(records):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    assert count_tokens("a b c d", tok) == 4
    row = trace(records["1"])
    messages = orjson.loads(row["messages"])
    exact, estimate = trace_tokens(messages, row["tools"], tok), trace_tokens(messages, row["tools"])
    assert 0 < exact < estimate  # the estimate errs high on purpose
    cfg = GateConfig(max_tokens=exact)
    assert format_gate(row, cfg).reason == "too_long"
    assert format_gate(row, cfg, tokenizer=tok) is None  # this tokenizer counts words and marks


def test_reason_table_is_derived_from_the_checks():
    checks = trace_checks()
    assert set(REASONS) == {str(r) for r in Reason} | {c.reason for c in checks} and all(REASONS.values())
    assert len(REASONS) == len(Reason) + len(checks)  # one declaration per code
    assert set(REASON_STAGE.values()) == {"read", "normalize", "dedupe", "structural", "reasoning_gate", "format_gate"}
    assert [c.reason for c in checks] == [code for code, stage, _ in reason_table()
                                          if stage in ("structural", "reasoning_gate", "format_gate")]
    assert all(REASON_STAGE[c.reason] == c.stage for c in checks)
    md = reasons_markdown()
    assert all(f"`{code}`" in md for code in REASONS) and md.count("\n") == len(REASONS) + 2


def _drop_proxy(rec, keep=lambda c: False):
    for step in rec["dialogue"]:
        step["extra_info"]["proxy_calls"] = [c for c in step["extra_info"].get("proxy_calls", []) if keep(c)]


# A record built for each trace check, from sample record 1 (gated as it is).
CHECK_CASES = {
    "no_tool_calls": lambda r: [s["completion"]["message"].pop("tool_call") for s in r["dialogue"]],
    "structural_unclear": _drop_proxy,
    "no_inference": lambda r: _drop_proxy(r, keep=lambda c: c["path"].startswith("/search/")),
    "no_reasoning_score": lambda r: r.update(reasoning_score=None),
    "reasoning_gate": lambda r: r.update(reasoning_score=0.3),
    "unknown_tool": lambda r: call(r, 0).update(name="buy_now"),
    "malformed_arguments": lambda r: call(r, 0).update(parameters={"q": "bag", "colour": "red"}),
    "unpaired_tool_call": lambda r: call(r, 1).pop("result"),
    "think_then_stop": lambda r: msg(r, 1).update(tool_call=[]),
    "recommend_count": lambda r: r["dialogue"].insert(2, copy.deepcopy(r["dialogue"][2])),
    "bad_product_ids": lambda r: call(r, 2)["parameters"].update(product_ids="the first one"),
    "too_long": lambda r: msg(r, 0).update(think="reconsider " * 30_000),
}


@pytest.mark.parametrize("check", trace_checks(), ids=lambda c: c.reason)
def test_every_check_fires_through_the_per_row_path(records, check):
    """Each check's reason, on a record built for it, through decide_line (the one per-row path);
    a check added without a case here fails this test."""
    rec = copy.deepcopy(records["1"])
    assert call(rec, 2)["name"] == "recommend_product" and decide_line("f.jsonl", 1, orjson.dumps(rec), DAY,
                                                                       DecideConfig()).get("reason") is None
    CHECK_CASES[check.reason](rec)
    counts = Counter()
    row = decide_line("f.jsonl", 1, orjson.dumps(rec), DAY, DecideConfig(), counts)
    assert (row.get("stage"), row.get("reason")) == (str(check.stage), check.reason), row.get("detail")
    # The check counted its failure, every check before it (in trace order) its pass, none after it ran.
    order = list(trace_checks())
    met = order[:order.index(check) + 1]
    assert +counts == {**{c.passed_key: 1 for c in met[:-1]}, check.failed_key: 1}
    take_back(counts, row["structural_label"], row["stage"], row["reason"], 1)  # a superseded copy's fate
    assert not +counts and not -counts


def test_checks_count_their_funnel(records):
    counts = Counter()
    rows = [trace(records[k]) for k in ("1", "2", "4", "5")]
    for row in rows:
        reasoning_gate(row, counts=counts) or format_gate(row, counts=counts)
    assert counts["reasoning_gate", "no_reasoning_score", "passed"] == 4
    # 4: reasoning score 0.1; 5: two recommend_product calls
    assert {k: n for k, n in counts.items() if k[2] == "failed"} == {
        ("reasoning_gate", "reasoning_gate", "failed"): 1, ("format_gate", "recommend_count", "failed"): 1}
    assert counts["reasoning_gate", "reasoning_gate", "passed"] == 3
    assert counts["format_gate", "too_long", "passed"] == 2
