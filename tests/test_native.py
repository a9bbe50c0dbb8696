"""The compiled fast path (core/native.py over native/*.c) against the Python reference.

Identity is the contract: for any batch of lines, `native.decide_lines` returns the same Arrow
batch as `decide.decide_lines`, column by column. Checked on simulator days of every kind
(seeds, dialect mixes, corruption, re-uploads, a cut file), on the shared samples, on real
records re-written as `json.dumps` writes them, on hostile lines, and on thousands of random
mutations of real records; the JSON reader alone is checked against orjson.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from datetime import date
from pathlib import Path

import orjson
import pytest

from shopdistill_assets.core import decide, native
from shopdistill_assets.core.gates import GateConfig
from shopdistill_assets.core.structural import StructuralConfig

pytestmark = pytest.mark.skipif(not native.available(), reason="the C extension is not built here")

DAY = "2026-11-01"
CFG = decide.DecideConfig()


def assert_same(lines: list[bytes], cfg: decide.DecideConfig = CFG, name: str = "part-000.jsonl.gz",
                first: int = 1) -> float:
    """Both paths on one batch: equal column by column; returns the native path's fast share."""
    ref = decide.decide_lines(name, first, lines, DAY, cfg)
    out = native.decide_lines(name, first, lines, DAY, cfg)
    assert out.schema == ref.schema
    for column in ref.schema.names:
        a, b = ref.column(column), out.column(column)
        if not a.equals(b):
            la, lb = a.to_pylist(), b.to_pylist()
            k = next(i for i in range(len(la)) if la[i] != lb[i])
            pytest.fail(f"{column} differs at line {first + k}:\n ref {la[k]!r:.400}\n nat {lb[k]!r:.400}\n"
                        f" line {lines[k][:300]!r}")
    return native.fast_share(name, first, lines, DAY, cfg)


def day_lines(root: Path) -> dict[str, list[bytes]]:
    out = {}
    for path in sorted(root.glob("firehose/day=*/*.jsonl.gz")):
        lines = []
        try:
            with gzip.open(path, "rb") as stream:
                lines.extend(raw.rstrip(b"\r\n") for raw in stream)
        except EOFError:
            pass  # the simulator's cut file: its intact lines
        out[path.name] = lines
    return out


@pytest.fixture(scope="module")
def sim_days(tmp_path_factory) -> dict[str, dict[str, list[bytes]]]:
    """Small simulated days: three seeds with the defaults, one full of other dialects and
    corruption, one where every run is re-uploaded."""
    from shopdistill_assets.sim import ArenaConfig, simulate

    kinds = {
        "seed0": dict(seed=0), "seed1": dict(seed=1), "seed2": dict(seed=2),
        "mixed": dict(seed=3, other_dialect_share=0.5, corrupt_share=0.08),
        "reuploads": dict(seed=4, reupload_share=1.0),
    }
    days = {}
    for kind, extra in kinds.items():
        root = tmp_path_factory.mktemp(kind)
        simulate(ArenaConfig(out=root, start_day=date.fromisoformat(DAY), days=2, traces_per_day=150, **extra))
        days[kind] = day_lines(root)
    return days


@pytest.mark.parametrize("kind", ["seed0", "seed1", "seed2", "mixed", "reuploads"])
def test_simulator_days_identical(sim_days, kind: str) -> None:
    shares = [assert_same(lines, name=name) for name, lines in sim_days[kind].items() if lines]
    if kind != "mixed":  # most lines of an ordinary day take the fast path
        assert sum(shares) / len(shares) > 0.85


def test_batches_and_line_numbers(sim_days) -> None:
    lines = next(iter(sim_days["seed0"].values()))
    for start in (0, 7, 100):
        assert_same(lines[start:start + 13], first=start + 1)


def test_other_configurations(sim_days) -> None:
    lines = [line for file in sim_days["seed1"].values() for line in file][:200]
    for cfg in (
        decide.DecideConfig(StructuralConfig(subtask_threshold=1, no_evidence_label="agentic",
                                             no_inference_label="subtask", templated_min_turns=2),
                            GateConfig(min_reasoning_score=0.8, max_tokens=3000, allow_extra_arguments=True)),
        decide.DecideConfig(gates=GateConfig(null_reasoning_score_policy="keep", judged_dialects=())),
        decide.DecideConfig(gates=GateConfig(judged_dialects=(), missing_judge_policy="reject")),
    ):
        assert_same(lines, cfg)


def test_shared_samples(shared_dir: Path) -> None:
    samples = shared_dir / "samples"
    lines = gzip.decompress((samples / "sn15-day.jsonl.gz").read_bytes()).splitlines()
    lines += (samples / "openai-messages.jsonl").read_bytes().splitlines()
    lines.append(orjson.dumps(orjson.loads((samples / "shoppingbench-rollout.json").read_bytes())))
    assert_same(lines)
    assert native.fast_share("s", 1, lines[:6], DAY, CFG) == 1.0  # the six readable primary lines


def test_json_dumps_style_input(sim_days) -> None:
    """Records written with whitespace and \\u escapes (Python's json.dumps): the C writer
    re-escapes them as orjson does, and stays on the fast path."""
    lines = [line for line in next(iter(sim_days["seed2"].values()))[:80]]
    rewritten = []
    for line in lines:
        try:
            rewritten.append(json.dumps(orjson.loads(line)).encode())
        except orjson.JSONDecodeError:
            rewritten.append(line)
    assert assert_same(rewritten) > 0.85


def test_corpus_day_through_both_paths_is_byte_identical(tmp_path, monkeypatch) -> None:
    """The whole corpus asset, once per path: every table of the day has the same bytes."""
    import dagster as dg

    from resources.firehose import FirehoseResource
    from resources.lake import LakeResource
    from shopdistill_assets.corpus import CORPUS_ASSETS, CORPUS_CHECKS
    from shopdistill_assets.ingest import raw_firehose
    from shopdistill_assets.sim import ArenaConfig, simulate

    day = "2026-11-05"
    simulate(ArenaConfig(out=tmp_path / "arena", start_day=date.fromisoformat(day), days=1, traces_per_day=300,
                         seed=7, corrupt_share=0.03, reupload_share=0.05, other_dialect_share=0.1))
    firehose = FirehoseResource(root=str(tmp_path / "arena" / "firehose"))
    lakes = {}
    for path in ("reference", "native"):
        monkeypatch.setenv(native.PATH_ENV, path)
        lakes[path] = LakeResource(root=str(tmp_path / f"lake-{path}"))
        result = dg.materialize([raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=day,
                                resources={"firehose": firehose, "lake": lakes[path]},
                                instance=dg.DagsterInstance.ephemeral(),
                                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        assert result.success
    for table in ("normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces"):
        ref, nat = (sorted(Path(lakes[p].day_path(table, day)).glob("part-*.parquet")) for p in ("reference", "native"))
        assert ref and [p.name for p in ref] == [p.name for p in nat], table
        for a, b in zip(ref, nat):
            assert a.read_bytes() == b.read_bytes(), (table, a.name)


# ---- hostile input ---------------------------------------------------------------------------

HOSTILE_VALUES = [
    None, True, False, 0, -0.0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 1.5, 1e300, 0.1, "", " ", "\u00a0", "x" * 300,
    "\u2028", "caf\u00e9", "\U0001f600", "a\nb", "<think>t</think>", "<tool_call>", "find_product", [], {}, [1, [2]],
    {"a": {"b": [None]}}, "\x00", "\\", '"',
]
RAW_HOSTILE = [
    b"", b"   ", b"\t", b"null", b"1", b'"just a string"', b"[]", b"{}", b"[1,2", b'{"a":', b"\xff\xfe",
    b'{"schema":"sn15.problem_run/v1","x":"\xc3"}', b'{"a":"\x00"}', b"\xef\xbb\xbf{}", b'{"a":1}x', b"[" * 5000,
    b"[" * 100 + b"]" * 100, b'{"a":' * 300 + b"1" + b"}" * 300, b"1" * 400, b"-" + b"9" * 400, b"1e999",
    b'{"k":"\\ud800"}', b'{"k":"\\udc00\\ud800"}', b'{"a":1,"a":2}', b'{"eval_run_id":"e","dialogue":[{}]}',
    b'{"eval_run_id":"e","problem_id":"p","dialogue":[]}', b'{"eval_run_id":"e","problem_id":"p","dialogue":null,'
    b'"status":"FAILED","schema":"sn15.problem_run/v1"}',
    b'{"eval_run_id":"e","problem_id":"p","dialogue":[],"status":"a\\u0000b"}',
    b'{"eval_run_id":"e","problem_id":"p","dialogue":[],"status":"' + b"s" * 400 + b'"}',
]


def _limit_lines(real: bytes) -> list[bytes]:
    """A real record pushed past each per-record work limit of the reference (over_limit)."""
    from shopdistill_assets.core.dialects import MAX_QUERY_CHARS, MAX_STEPS, MAX_TOOL_CALLS

    obj = orjson.loads(real)
    steps = dict(obj, dialogue=obj["dialogue"] * (MAX_STEPS // len(obj["dialogue"]) + 1))
    query = dict(obj, problem={**obj["problem"], "query": "q" * (MAX_QUERY_CHARS + 1)})
    step = obj["dialogue"][0]
    call = {"name": "find_product", "parameters": {"q": "x", "page": 1}, "tool_call_id": "x", "result": []}
    many = {**step, "completion": {**step["completion"], "message": {"think": "t", "tool_call": [call] * (MAX_TOOL_CALLS + 1)}}}
    calls = dict(obj, dialogue=[many])
    return [orjson.dumps(steps), orjson.dumps(query), orjson.dumps(calls)]


def test_hostile_lines_never_crash_and_match(sim_days) -> None:
    assert_same(RAW_HOSTILE)
    real = next(line for line in next(iter(sim_days["seed0"].values())) if b'"dialogue":[{' in line)
    assert_same([real[:k] for k in (1, 10, len(real) // 3, len(real) - 1)])  # truncated records
    assert_same(_limit_lines(real))
    assert_same([real.replace(b'"think":"', b'"think":"\xed\xa0\x80'), real.replace(b'"', b'"\x00', 1),
                 real + b"\x00", real.replace(b'"query":"', b'"query":"\\u00e9\\ud83d\\ude00\\n')])


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*path, i))


def _mutate(obj, rng: random.Random):
    paths = list(_paths(obj))[1:]
    if not paths:
        return
    path = rng.choice(paths)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    action = rng.random()
    if action < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    elif action < 0.25 and isinstance(parent[path[-1]], str):
        parent[path[-1]] = parent[path[-1]] + rng.choice([" ", "\u3000", "<think>", "0123", "\u00e9", "\"\\", "\n"])
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(HOSTILE_VALUES))  # never shared: no cycles


def test_mutated_records_match(sim_days) -> None:
    """Random single-field mutations of real records of every dialect: both paths agree on
    every one (read, normalize, structural and gate outcomes, details included)."""
    rng = random.Random(11)
    records = []
    for file in sim_days["mixed"].values():
        for line in file:
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    mutated = []
    for n in range(1500):
        obj = orjson.loads(orjson.dumps(rng.choice(records)))
        for _ in range(1 + n % 3):
            _mutate(obj, rng)
        mutated.append(orjson.dumps(obj) if n % 5 else json.dumps(obj).encode())
    for start in range(0, len(mutated), 300):
        assert_same(mutated[start:start + 300], first=start + 1)


# ---- the JSON reader alone -------------------------------------------------------------------

JSON_CASES = [
    b"0", b"-0", b"-0.0", b"0.0", b"1.5", b"1.50", b"1e5", b"1E5", b"100.0", b"0.0001", b"0.00001", b"1e-7",
    b"123456789012345.0", b"1234567890123456.0", b"9223372036854775807", b"9223372036854775808",
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808", b"-9223372036854775809", b"01",
    b"1.", b".5", b"NaN", b'"\\u0041"', b'"\\/"', b'"\\u001f"', b'"\\ud83d\\ude00"', b'"\\ud83d"', b'"a\x7fb"',
    b'"\xe2\x80\xa8"', b'"\xc0\x80"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b' [1, {"a" : [true,false,null]} ] ',
    b'{"a":1,"b":{"a":2}}', b'{"":1,"":2}', b'{"\\u0061":1,"a":2}', b'"\\\\\\"\\b\\f\\n\\r\\t"', b"[1e400]",
    b"1231.9579999999999", b"0.30000000000000004", b"1.0000000000000002", b"0.1000000000000001", b"4503599627370496.5",
    b"0.5000000000000001", b"2.0000000000000004", b"0.00012345678901234567", b"123456789012345.67",
    b"[" * 199 + b"]" * 199, b"[" * 300 + b"]" * 300, b"tru", b"nul", b'"abc', b"{,}", b"[1,]", b'{"a"1}',
]


def _orjson_dump(data: bytes) -> bytes | None:
    try:
        return orjson.dumps(orjson.loads(data))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.random()
    if depth > 4 or kind < 0.3:
        return rng.choice([None, True, False, rng.randint(-10**6, 10**6), rng.random() * 10**rng.randint(-6, 18),
                           rng.choice(["", "a", "\u00e9\n\t\"\\", "\U0001f600", "\x01\x1f", "x" * 40])])
    if kind < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice(["a", "b", "c", "\u00e9", "", "k" * 20]) + str(i): _random_json(rng, depth + 1)
            for i in range(rng.randint(0, 5))}


def test_json_reader_agrees_with_orjson() -> None:
    from shopdistill_assets.core import _corpus_native

    rng = random.Random(5)
    cases = list(JSON_CASES)
    for _ in range(3000):
        value = _random_json(rng)
        text = orjson.dumps(value) if rng.random() < 0.5 else json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        if rng.random() < 0.2:  # damage it
            k = rng.randrange(len(text) + 1)
            text = text[:k] + rng.choice([b"", b"\xff", b"\\", b'"', b",", b"]", b" ", b"\x00"]) + text[k + 1:]
        cases.append(text)
    for data in cases:
        out, err, unsupported = _corpus_native.dump(data)
        expected = _orjson_dump(data)
        if out is not None:
            assert out == expected, data
        elif not unsupported:  # the reader says invalid: orjson must refuse it too
            assert expected is None, (data, err)


def test_json_reader_on_real_problems(shared_dir: Path) -> None:
    """ShoppingBench's public problems (json.dumps style: spaces, \\u escapes) as orjson writes them."""
    from shopdistill_assets.core import _corpus_native

    lines = [line for path in sorted((shared_dir / "data" / "shoppingbench").glob("*.jsonl"))
             for line in path.read_bytes().splitlines() if line.strip()]
    assert len(lines) >= 900
    for line in lines:
        assert _corpus_native.dump(line)[0] == orjson.dumps(orjson.loads(line))


def test_python_whitespace_rules(sim_days) -> None:
    """str.strip / str.isspace semantics (Unicode whitespace) where the gates decide on them: a
    response that is only whitespace (think_then_stop), product ids padded with it, a query."""
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()] + ["\u200b", "\ufeff", "x"]
    lines = next(iter(sim_days["seed0"].values()))
    decided = decide.decide_lines("f", 1, lines, DAY, CFG)
    gated = [k for k, (label, reason) in enumerate(zip(decided.column("structural_label").to_pylist(),
                                                       decided.column("reason").to_pylist()))
             if label == "agentic" and reason is None and decided.column("dialect")[k].as_py() == "sn15.problem_run/v1"]
    real = orjson.loads(lines[gated[0]])  # a primary trace that passes every gate
    mutated = []
    for w in spaces:
        obj = copy.deepcopy(real)
        obj["dialogue"][-1]["completion"]["message"].pop("tool_call", None)
        obj["dialogue"][-1]["completion"]["message"]["response"] = w * 3
        mutated.append(orjson.dumps(obj))
        obj = copy.deepcopy(real)
        for step in obj["dialogue"]:
            for call in step["completion"]["message"].get("tool_call", []):
                if call["name"] == "recommend_product":
                    call["parameters"]["product_ids"] = f"{w}123 ,{w}456{w}"
        obj["problem"]["query"] = w + obj["problem"]["query"] + w
        mutated.append(orjson.dumps(obj))
    assert_same(mutated)
    reasons = set(native.decide_lines("f", 1, mutated, DAY, CFG).column("reason").to_pylist())
    assert {"think_then_stop", "bad_product_ids", None} <= reasons  # the cases exercised
