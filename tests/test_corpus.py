"""The corpus assets materialized on a simulated arena, measured against the simulator's truth.

raw_firehose -> corpus (normalized_traces, agentic_traces, subtask_traces, gated_traces,
rejected_traces in one step) + the blocking `conservation` check, through Dagster in-process. Two simulated
days of ~600 traces (2 % corrupt lines, 3 % re-uploads, a truncated late file) are built once
per module; every test reads the lake those runs wrote (or a copy of it) and asserts numbers.
Run with `-s` to see the precision/recall and fault confusion tables.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import boto3
import dagster as dg
import orjson
import polars as pl
import pytest

from resources.firehose import FirehoseResource
from resources.lake import LakeResource
from resources.s3 import parse_s3_uri
from shopdistill_assets.corpus.assets import CODE_VERSION, CORPUS_ASSETS, CORPUS_CHECKS
from shopdistill_assets.corpus.gates import FORMAT_CHECKS, REASONING_CHECKS
from shopdistill_assets.corpus.structural import STRUCTURAL_CHECKS
from shopdistill_assets.ingest.assets import raw_firehose
from shopdistill_assets.sim import ArenaConfig, simulate

DAYS = ("2026-11-02", "2026-11-03")
TRACES_PER_DAY = 600
LATE_FILE = "part-zzz-late.jsonl.gz"
PRIMARY = "sn15.problem_run/v1"
FINAL_TABLES = ("gated_traces", "subtask_traces", "rejected_traces")
FUNNEL_ASSETS = ("normalized_traces", "agentic_traces", "gated_traces", "rejected_traces")
FAULTS = ("unpaired_tool_call", "recommend_count", "bad_product_ids", "too_long", "think_then_stop",
          "malformed_arguments", "unknown_tool")
# What each kind of simulated corruption may be logged as (a cut line can end inside a UTF-8
# sequence; a broken `openai.messages` record may fail detection or its dialect's shape).
CORRUPT_REASONS = {
    "bad_json": {"json_decode", "bad_encoding"},
    "not_an_object": {"not_an_object"},
    "unknown_dialect": {"unknown_dialect"},
    "wrong_types": {"bad_field_type", "dialect_violation", "unknown_dialect"},
}


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # keeps `pytest -s` readable


def run_corpus(day: str, firehose: FirehoseResource, lake: LakeResource, assets=None, run_config=None):
    return dg.materialize(
        assets if assets is not None else [raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS],
        partition_key=day,
        resources={"firehose": firehose, "lake": lake},
        instance=dg.DagsterInstance.ephemeral(),
        run_config={**QUIET, **(run_config or {})},
    )


def check_result(result: dg.ExecuteInProcessResult, name: str = "conservation", asset: str = "gated_traces"):
    (evaluation,) = [e for e in result.get_asset_check_evaluations()
                     if e.check_name == name and e.asset_key.to_user_string() == asset]
    return evaluation


def read_truth(arena: Path, day: str) -> list[dict]:
    data = gzip.decompress((arena / "truth" / f"day={day}.jsonl.gz").read_bytes())
    return [orjson.loads(line) for line in data.splitlines()]


def raw_lines(folder: Path, name: str) -> list[bytes]:
    return gzip.decompress((folder / name).read_bytes()).splitlines()


def intact_line_count(path: Path) -> int:
    """Complete lines in a multi-member gzip file whose last member is cut short (decoded
    independently of the firehose reader, member by member)."""
    data, out = path.read_bytes(), []
    while data:
        member = zlib.decompressobj(wbits=31)
        out.append(member.decompress(data))
        if not member.eof:
            break
        data = member.unused_data
    return b"".join(out).count(b"\n")


@dataclass
class Corpus:
    arena: Path
    firehose: FirehoseResource
    lake: LakeResource
    results: dict[str, dg.ExecuteInProcessResult]
    truth: dict[str, list[dict]]

    def table(self, name: str, day: str) -> pl.DataFrame:
        return self.lake.read_day(name, day)

    def fates(self, day: str) -> dict[tuple[str, int], list[tuple[str, str | None]]]:
        """(source_file, source_line) -> [(final table, reason or None)] over the three tables."""
        out: dict[tuple[str, int], list] = defaultdict(list)
        for name in FINAL_TABLES:
            df = self.table(name, day)
            reasons = df["reason"].to_list() if name == "rejected_traces" else [None] * df.height
            for f, n, r in zip(df["source_file"].to_list(), df["source_line"].to_list(), reasons):
                out[(f, n)].append((name, r))
        return out

    def keys(self, name: str, day: str) -> set[tuple[str, int]]:
        df = self.table(name, day)
        return set(zip(df["source_file"].to_list(), df["source_line"].to_list()))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    arena = tmp_path_factory.mktemp("arena")
    simulate(ArenaConfig(out=arena, start_day=date.fromisoformat(DAYS[0]), days=len(DAYS),
                         traces_per_day=TRACES_PER_DAY, seed=3, corrupt_share=0.02, reupload_share=0.03))
    firehose = FirehoseResource(root=str(arena / "firehose"))
    lake = LakeResource(root=str(tmp_path_factory.mktemp("lake")))
    results = {day: run_corpus(day, firehose, lake) for day in DAYS}
    return Corpus(arena, firehose, lake, results, {day: read_truth(arena, day) for day in DAYS})


def _key(t: dict) -> tuple[str, int]:
    return t["source_file"], t["source_line"]


# ---- conservation ----------------------------------------------------------------------------


@pytest.mark.parametrize("day", DAYS)
def test_conservation_every_line_lands_exactly_once(corpus, day):
    result = corpus.results[day]
    assert result.success
    check = check_result(result)
    assert check.passed, check.description
    meta = {k: v.value for k, v in check.metadata.items()}
    rows = {name: corpus.table(name, day).height for name in FINAL_TABLES}
    assert meta["lines_read"] == meta["accounted"] == sum(rows.values())
    assert meta["duplicates"] == 0
    assert {name: meta[name] for name in FINAL_TABLES} == rows

    fates = corpus.fates(day)
    truth = corpus.truth[day]
    assert len(truth) >= TRACES_PER_DAY
    for t in truth:
        assert len(fates[_key(t)]) == 1, (t, fates[_key(t)])
    # Nothing but truth lines and the late file's lines, each once.
    truth_keys = {_key(t) for t in truth}
    late = sorted(line for (f, line) in fates if f == LATE_FILE)
    assert set(fates) == truth_keys | {(LATE_FILE, line) for line in late}
    assert all(len(v) == 1 for v in fates.values())

    # The truncated late file: its intact lines, then one truncated_file row after them.
    intact = intact_line_count(corpus.arena / "firehose" / f"day={day}" / LATE_FILE)
    assert intact >= 2
    assert late == list(range(1, intact + 2))
    ledger = corpus.table("rejected_traces", day)
    truncated = ledger.filter(pl.col("reason") == "truncated_file")
    assert truncated.select("source_file", "source_line", "stage").rows() == [(LATE_FILE, intact + 1, "read")]
    assert meta["lines_read"] == len(truth) + intact + 1


# ---- structural filter -------------------------------------------------------------------------


def _prf(pred: list[bool], true: list[bool]) -> tuple[float, float, int, int]:
    tp = sum(p and t for p, t in zip(pred, true))
    n_pred, n_true = sum(pred), sum(true)
    return (tp / n_pred if n_pred else 1.0), (tp / n_true if n_true else 1.0), n_pred, n_true


def test_structural_precision_and_recall(corpus):
    """Over every trace that reached the structural filter (rows of normalized_traces), both days."""
    labels, styles = [], []
    for day in DAYS:
        agentic, subtask = corpus.keys("agentic_traces", day), corpus.keys("subtask_traces", day)
        reached = corpus.keys("normalized_traces", day)
        for t in corpus.truth[day]:
            if _key(t) in reached:
                labels.append("agentic" if _key(t) in agentic else "subtask" if _key(t) in subtask else "reject")
                styles.append(t["style"])
    assert len(labels) >= 800
    a_p, a_r, a_np, a_nt = _prf([l == "agentic" for l in labels], [s in ("agentic", "broken") for s in styles])
    s_p, s_r, s_np, s_nt = _prf([l == "subtask" for l in labels], [s == "subtask" for s in styles])
    # Decoys (scripted runs: searches, templated thinks, not one inference call) are no LLM
    # agent at all: rejected as no_inference, in neither table.
    confusion = Counter(zip(styles, labels))
    print(f"\nstructural filter over {len(labels)} traces (2 days)")
    print(f"  agentic (truth agentic|broken): precision {a_p:.4f} recall {a_r:.4f}  (predicted {a_np}, true {a_nt})")
    print(f"  subtask (truth subtask):        precision {s_p:.4f} recall {s_r:.4f}  (predicted {s_np}, true {s_nt})")
    print("  truth style -> label: " + ", ".join(f"{s}->{l}: {n}" for (s, l), n in sorted(confusion.items())))
    assert a_p >= 0.95 and a_r >= 0.95
    assert s_p >= 0.95 and s_r >= 0.95
    decoys = sum(n for (s, _), n in confusion.items() if s == "decoy")
    assert decoys >= 20 and confusion[("decoy", "reject")] == decoys


# ---- the ledger's reasons ------------------------------------------------------------------------


def _fate_of_truth(corpus: Corpus):
    """(truth record, [(table, reason)]) for every truth line of both days."""
    for day in DAYS:
        fates = corpus.fates(day)
        for t in corpus.truth[day]:
            yield day, t, fates[_key(t)][0]


def test_broken_faults_are_rejected_with_their_reason(corpus):
    confusion: dict[str, Counter] = defaultdict(Counter)
    for _, t, (table, reason) in _fate_of_truth(corpus):
        if t["style"] == "broken" and not t.get("corrupt") and reason != "superseded":
            confusion[t["fault"]][reason or table] += 1
    print("\nbroken fault -> fate (both days)")
    for fault in FAULTS:
        row = confusion[fault]
        print(f"  {fault:<20} {sum(row.values()):>3}: " + ", ".join(f"{k} {n}" for k, n in row.most_common()))
    for fault in FAULTS:
        row = confusion[fault]
        assert sum(row.values()) >= 5, (fault, row)
        assert row[fault] / sum(row.values()) >= 0.9, (fault, row)
        # Whatever is not its own code is still a rejection, never a kept trace.
        assert not row.keys() & {"gated_traces", "subtask_traces"}, (fault, row)


def test_failed_and_timed_out_runs_are_failed_runs(corpus):
    fates = Counter((t["style"], reason) for _, t, (_, reason) in _fate_of_truth(corpus)
                    if t["style"] in ("failed", "timeout") and not t.get("corrupt"))
    assert {reason for _, reason in fates} == {"failed_run"}
    assert fates[("failed", "failed_run")] >= 40 and fates[("timeout", "failed_run")] >= 20


def test_corrupt_lines_are_rejected_at_read_or_normalize(corpus):
    kinds: dict[str, Counter] = defaultdict(Counter)
    stages = Counter()
    for day in DAYS:
        ledger = corpus.table("rejected_traces", day)
        stage_of = {(f, n): s for f, n, s in ledger.select("source_file", "source_line", "stage").iter_rows()}
        fates = corpus.fates(day)
        for t in corpus.truth[day]:
            if t.get("corrupt"):
                table, reason = fates[_key(t)][0]
                assert table == "rejected_traces", t
                kinds[t["corrupt"]][reason] += 1
                stages[stage_of[_key(t)]] += 1
    print("\ncorrupt kind -> reason: " + "; ".join(f"{k}: {dict(v)}" for k, v in sorted(kinds.items())))
    assert sum(stages.values()) >= 12
    assert set(stages) <= {"read", "normalize"}
    for kind, reasons in kinds.items():
        assert set(reasons) <= CORRUPT_REASONS[kind], (kind, reasons)


def _updated_at(line: bytes) -> datetime:
    return datetime.fromisoformat(orjson.loads(line)["updated_at"])


def test_reuploads_are_superseded_once_and_the_later_copy_kept(corpus):
    pairs_checked = 0
    for day in DAYS:
        folder = corpus.arena / "firehose" / f"day={day}"
        lines = {name: raw_lines(folder, name) for name in {t["source_file"] for t in corpus.truth[day]}}
        fates = corpus.fates(day)
        by_run = defaultdict(list)
        for t in corpus.truth[day]:
            if not t.get("corrupt"):
                by_run[t["eval_run_id"]].append(t)
        superseded = {k for k, v in fates.items() if v[0][1] == "superseded"}
        expected = set()
        for copies in by_run.values():
            if len(copies) == 1:
                continue
            assert len(copies) == 2 and sum(bool(c.get("reupload")) for c in copies) == 1, copies
            if copies[0]["style"] in ("failed", "timeout"):
                # Not finished: both copies stop at normalize as failed_run, before dedupe.
                assert [fates[_key(c)][0][1] for c in copies] == ["failed_run"] * 2
                continue
            stamps = [_updated_at(lines[c["source_file"]][c["source_line"] - 1]) for c in copies]
            older, newer = (copies[0], copies[1]) if stamps[0] < stamps[1] else (copies[1], copies[0])
            assert stamps[0] != stamps[1]
            assert fates[_key(older)] == [("rejected_traces", "superseded")]
            assert fates[_key(newer)][0][1] != "superseded"
            expected.add(_key(older))
            pairs_checked += 1
        # Exactly one superseded row per in-day pair, and none elsewhere (a re-upload carried
        # over from the previous day has no copy on this day: it is kept).
        assert superseded == expected
    assert pairs_checked >= 15


# ---- the reasoning gate ------------------------------------------------------------------------


def test_reasoning_gate_threshold_and_a_stricter_run(corpus, tmp_path):
    day = DAYS[0]
    gated = corpus.table("gated_traces", day)
    primary = gated.filter(pl.col("dialect") == PRIMARY)
    assert primary.height >= 150
    assert primary["reasoning_score"].null_count() == 0
    assert primary["reasoning_score"].min() >= 0.5
    ledger = corpus.table("rejected_traces", day)
    assert ledger.filter(pl.col("reason") == "reasoning_gate").height >= 10

    # A copy of the lake, so the module's lake stays as the default run wrote it.
    lake = LakeResource(root=str(tmp_path / "lake"))
    shutil.copytree(corpus.lake.root, lake.root)
    strict = run_corpus(day, corpus.firehose, lake, assets=[*CORPUS_ASSETS, *CORPUS_CHECKS],
                        run_config={"ops": {"corpus": {"config": {"min_reasoning_score": 0.8}}}})
    assert strict.success
    assert check_result(strict).passed
    strict_gated = lake.read_day("gated_traces", day)
    assert 0 < strict_gated.height < gated.height
    expected = gated.filter((pl.col("dialect") != PRIMARY) | (pl.col("reasoning_score") >= 0.8))
    assert strict_gated.select("source_file", "source_line").sort("source_file", "source_line").rows() == \
        expected.select("source_file", "source_line").sort("source_file", "source_line").rows()
    strict_ledger = lake.read_day("rejected_traces", day)
    assert strict_ledger.height == ledger.height + (gated.height - strict_gated.height)
    print(f"\nreasoning gate {day}: min 0.5 keeps {gated.height}, min 0.8 keeps {strict_gated.height}")


# ---- determinism ---------------------------------------------------------------------------------


def test_rematerializing_a_day_gives_identical_bytes(corpus, tmp_path):
    day = DAYS[1]
    lake = LakeResource(root=str(tmp_path / "lake"))
    # One worker this time (the module's run used the default pool): same bytes either way.
    one_worker = {"ops": {"corpus": {"config": {"workers": 1}}}}
    again = run_corpus(day, corpus.firehose, lake, run_config=one_worker)
    assert again.success and check_result(again).passed
    for asset in ("normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces"):
        first = sorted(Path(corpus.lake.day_path(asset, day)).glob("part-*.parquet"))
        second = sorted(Path(lake.day_path(asset, day)).glob("part-*.parquet"))
        assert [p.name for p in first] == [p.name for p in second] and first, asset
        for a, b in zip(first, second):
            assert a.read_bytes() == b.read_bytes(), (asset, a.name)


def test_agentic_traces_carry_the_verdict_not_the_text(corpus):
    """agentic_traces is identity, scores and evidence; the trace text is in normalized and gated."""
    from shopdistill_assets.corpus.decide import AGENTIC_SCHEMA, TRACE_TEXT_COLUMNS

    for day in DAYS:
        agentic, gated = corpus.table("agentic_traces", day), corpus.table("gated_traces", day)
        assert agentic.columns == AGENTIC_SCHEMA.names and not set(TRACE_TEXT_COLUMNS) & set(agentic.columns)
        assert set(TRACE_TEXT_COLUMNS) <= set(gated.columns) and gated.height
        assert set(gated["trace_id"]) <= set(agentic["trace_id"])


@pytest.mark.parametrize("fault", [None, EOFError("cut"), ValueError("crc"), OSError("io")])
def test_the_recount_counts_the_units_the_reader_hands_out(fault):
    """conservation's recount (newlines only) == LineReader's units, however the stream is cut."""
    import random

    from shopdistill_assets.corpus.lines import LineReader, count_units

    rng = random.Random(1)
    for _ in range(200):
        data = b"".join(rng.choice([b"\n", b"\r\n", b"{}", b"x" * rng.randint(1, 40)]) for _ in range(rng.randint(0, 30)))
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 6))))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]

        def chunks():
            yield from pieces
            if fault is not None:
                raise fault

        reader = LineReader(chunks(), max_line_bytes=16)  # small: oversize lines are units too
        expected = sum(1 for _ in reader) + (reader.end is not None)
        assert count_units(chunks()) == expected, (data, pieces)


# ---- the shared real-shaped samples ----------------------------------------------------------------


def test_shared_samples_meet_their_documented_fates(shared_dir, tmp_path):
    samples = shared_dir / "samples"
    day = "2026-11-20"
    folder = tmp_path / "firehose" / f"day={day}"
    folder.mkdir(parents=True)
    shutil.copyfile(samples / "sn15-day.jsonl.gz", folder / "part-000.jsonl.gz")
    rollout = orjson.loads((samples / "shoppingbench-rollout.json").read_bytes())
    (folder / "part-001.jsonl").write_bytes(orjson.dumps(rollout) + b"\n")
    shutil.copyfile(samples / "openai-messages.jsonl", folder / "part-002.jsonl")
    lake = LakeResource(root=str(tmp_path / "lake"))

    result = run_corpus(day, FirehoseResource(root=str(tmp_path / "firehose")), lake)

    assert result.success and check_result(result).passed
    fate = {}
    for name in FINAL_TABLES:
        df = lake.read_day(name, day)
        reasons = df["reason"].to_list() if name == "rejected_traces" else [name] * df.height
        for f, n, r in zip(df["source_file"].to_list(), df["source_line"].to_list(), reasons):
            assert (f, n) not in fate
            fate[(f, n)] = r
    assert fate == {
        ("part-000.jsonl.gz", 1): "gated_traces",  # agentic, clean
        ("part-000.jsonl.gz", 2): "gated_traces",  # outcome failed, judge 0.7: still a corpus row
        ("part-000.jsonl.gz", 3): "subtask_traces",  # a Python loop searched
        ("part-000.jsonl.gz", 4): "reasoning_gate",  # judge 0.1
        ("part-000.jsonl.gz", 5): "recommend_count",  # two recommend_product calls
        ("part-000.jsonl.gz", 6): "failed_run",  # FAILED, empty dialogue
        ("part-000.jsonl.gz", 7): "json_decode",  # truncated JSON
        ("part-001.jsonl", 1): "gated_traces",  # the ShoppingBench rollout
        ("part-002.jsonl", 1): "gated_traces",  # the already-canonical OpenAI record
    }
    gated = lake.read_day("gated_traces", day)
    assert sorted(gated["dialect"].to_list()) == ["openai.messages", "shoppingbench.rollout", PRIMARY, PRIMARY]


# ---- what the UI shows -----------------------------------------------------------------------------


def test_materializations_carry_the_funnel_metadata(corpus):
    for day in DAYS:
        events = corpus.results[day].get_asset_materialization_events()
        meta = {e.step_materialization_data.materialization.asset_key.to_user_string():
                e.step_materialization_data.materialization.metadata for e in events}
        assert set(meta) == {"raw_firehose", *FUNNEL_ASSETS, "subtask_traces"}
        values = {asset: {k: getattr(v, "value", v) for k, v in m.items()} for asset, m in meta.items()}
        for asset in FUNNEL_ASSETS:
            for key in ("in", "kept", "rejected"):
                assert isinstance(meta[asset][key], dg.IntMetadataValue), (asset, key)
            assert isinstance(meta[asset]["reasons"], dg.MarkdownMetadataValue), asset
            table = values[asset]["reasons"]
            assert table.startswith("| stage | reason | count |") if values[asset]["rejected"] else \
                table == "_nothing rejected_", (asset, table)
        n, a, g, r = (values[k] for k in FUNNEL_ASSETS)
        s = values["subtask_traces"]
        lines_read = check_result(corpus.results[day]).metadata["lines_read"].value
        assert n["in"] == lines_read == n["kept"] + n["rejected"]
        assert a["in"] == n["kept"] == a["kept"] + s["kept"] + a["rejected"]
        assert g["in"] == a["kept"] == g["kept"] + g["rejected"]
        ledger_rows = corpus.table("rejected_traces", day).height
        assert r["rejected"] == n["rejected"] + a["rejected"] + g["rejected"] == ledger_rows
        # The ledger's own funnel: every line in, the lines kept by the two final tables out.
        assert r["in"] == lines_read and r["kept"] == g["kept"] + s["kept"] and r["in"] == r["kept"] + r["rejected"]
        assert sum(v for k, v in r.items() if k.startswith("stage/")) == r["rejected"]
        for asset in (*FUNNEL_ASSETS, "subtask_traces"):  # what made the table, shown beside it
            assert values[asset]["code_version"] == CODE_VERSION
            assert values[asset]["config"]["min_reasoning_score"] == 0.5
        assert s["kept"] == corpus.table("subtask_traces", day).height
        assert g["kept"] == corpus.table("gated_traces", day).height
        for asset in (*FUNNEL_ASSETS, "subtask_traces"):  # the UI's row count is the table's, ledger included
            assert values[asset]["dagster/row_count"] == corpus.table(asset, day).height, asset
        assert "| read | `truncated_file` | 1 |" in values["normalized_traces"]["reasons"]
        # The check stages' numbers are the named checks' own counters, one pair per check, in check
        # order; they agree with the ledger (check_counts, blocking, evaluated in the corpus step).
        ledger = corpus.table("rejected_traces", day)
        for asset, checks in (("agentic_traces", STRUCTURAL_CHECKS), ("gated_traces", (*REASONING_CHECKS, *FORMAT_CHECKS))):
            assert [k for k in values[asset] if k.startswith("check/")] == [
                f"check/{c.reason}/{o}" for c in checks for o in ("passed", "failed")]
            for c in checks:
                assert values[asset][f"check/{c.reason}/failed"] == values[asset][f"rejected/{c.reason}"] == \
                    ledger.filter((pl.col("stage") == str(c.stage)) & (pl.col("reason") == c.reason)).height
            assert check_result(corpus.results[day], "check_counts", asset).passed
        assert values["gated_traces"]["check/too_long/passed"] == g["kept"]
        assert values["agentic_traces"]["check/no_inference/passed"] == a["kept"] + s["kept"]


# ---- the command line ------------------------------------------------------------------------------


def test_cli_corpus_prints_the_funnel(corpus, tmp_path):
    day = DAYS[0]
    env = {**os.environ, "SHOPDISTILL_HOME": str(tmp_path / "home")}
    for var in ("SHOPDISTILL_FIREHOSE", "SHOPDISTILL_LAKE", "SHOPDISTILL_S3_ENDPOINT_URL", "DAGSTER_HOME"):
        env.pop(var, None)
    cli = Path(sys.executable).with_name("shopdistill")
    proc = subprocess.run([str(cli), "corpus", "--firehose", corpus.firehose.root, "--lake", str(tmp_path / "lake"),
                           "--day", day], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The funnel row: the day, six counts, the verdict (other rows of the day may follow).
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith(day) and line.split()[1].isdigit()]
    cells = row.split()
    assert len(cells) == 8, row
    assert cells[-1] == "ok", row
    lines, traces, agentic, subtask, gated, rejected = map(int, cells[1:7])
    expected = {k: getattr(v, "value", v) for k, v in check_result(corpus.results[day]).metadata.items()}
    assert lines == expected["lines_read"]
    assert (gated, subtask, rejected) == (expected["gated_traces"], expected["subtask_traces"],
                                          expected["rejected_traces"])
    assert traces == corpus.table("normalized_traces", day).height
    assert agentic == corpus.table("agentic_traces", day).height
    assert (tmp_path / "lake" / "gated_traces" / f"day={day}" / "part-00000.parquet").is_file()


# ---- the lake on S3 ---------------------------------------------------------------------------------


def test_lake_on_s3_conserves_and_matches_the_local_lake(corpus, moto_s3, tmp_path, monkeypatch):
    day = DAYS[0]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where an S3 lake's scratch goes
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket="corpus-lake")
    lake = LakeResource(root="s3://corpus-lake/lake", endpoint_url=moto_s3)

    result = run_corpus(day, corpus.firehose, lake)

    assert result.success
    check = check_result(result)
    assert check.passed, check.description
    assert check.metadata["lines_read"].value == check_result(corpus.results[day]).metadata["lines_read"].value
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    for asset in ("normalized_traces", "gated_traces", "subtask_traces", "rejected_traces"):
        local = sorted(Path(corpus.lake.day_path(asset, day)).glob("part-*.parquet"))
        keys = [parse_s3_uri(uri)[1] for uri in lake.day_part_uris(asset, day)]  # the current version's parts
        assert [k.rsplit("/", 1)[1] for k in keys] == [p.name for p in local], asset
        for key, path in zip(keys, local):
            assert s3.get_object(Bucket="corpus-lake", Key=key)["Body"].read() == path.read_bytes(), key
    leftovers = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert not leftovers, f"an S3 lake run left {len(leftovers)} downloaded parts in local scratch: {leftovers[:4]}"


# ---- the Dagster shape: one step, five tables, conservation on each ---------------------------------


def test_selecting_one_table_runs_the_whole_step_and_records_all_five(tiny_day, tmp_path):
    from shopdistill_assets.corpus.assets import TABLES, conservation, corpus

    assert sorted(k.to_user_string() for k in corpus.keys) == sorted(TABLES)
    assert set(corpus.code_versions_by_key.values()) == {CODE_VERSION}
    assert sorted((s.key.asset_key.to_user_string(), s.blocking) for s in conservation.check_specs) == \
        sorted((t, True) for t in TABLES)
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    resources = {"firehose": firehose, "lake": lake}
    assert dg.materialize([raw_firehose], partition_key=tiny_day.day, resources=resources, instance=instance,
                          run_config=QUIET).success
    # One table selected (issue 21 item 7): the one pass runs and rewrites all five, so they still
    # add up, and Dagster records all five, with the selected table's blocking checks.
    result = dg.materialize([*CORPUS_ASSETS, *CORPUS_CHECKS], partition_key=tiny_day.day, selection=["gated_traces"],
                            resources=resources, instance=instance, run_config=QUIET)
    assert result.success
    assert sorted((e.asset_key.to_user_string(), e.check_name, e.passed) for e in result.get_asset_check_evaluations()) \
        == [("gated_traces", "check_counts", True), ("gated_traces", "conservation", True)]
    for table in TABLES:
        assert instance.get_latest_materialization_event(dg.AssetKey(table)) is not None, table
        assert lake.has_day(table, tiny_day.day), table


def test_a_failed_conservation_check_blocks_what_follows(tiny_day, tmp_path, monkeypatch):
    import shopdistill_assets.corpus.assets as corpus_module
    from shopdistill_assets.split.assets import leak_clusters

    real = corpus_module.count_units
    monkeypatch.setattr(corpus_module, "count_units", lambda *a, **k: real(*a, **k) + 1)  # one line unaccounted
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    result = dg.materialize([raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS, leak_clusters], partition_key=tiny_day.day,
                            resources={"firehose": firehose, "lake": lake}, instance=dg.DagsterInstance.ephemeral(),
                            run_config=QUIET, raise_on_error=False)
    evaluations = [e for e in result.get_asset_check_evaluations() if e.check_name == "conservation"]
    assert len(evaluations) == 5 and not any(e.passed for e in evaluations)
    assert "7 lines read but 6 rows accounted" not in evaluations[0].description  # the real recount is 7
    assert "8 lines read but 7 rows accounted" in evaluations[0].description
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "leak_clusters" not in materialized and "gated_traces" in materialized


def test_check_counters_that_disagree_with_the_ledger_fail_the_day(tiny_day, tmp_path, monkeypatch):
    """One trace counted twice by a check (a bug in a check's counting): check_counts fails, loudly."""
    import shopdistill_assets.corpus.assets as corpus_module
    from shopdistill_assets.split.assets import leak_clusters

    real = corpus_module.day_check_counts

    def one_too_many(*args):
        counts = real(*args)
        counts["reasoning_gate", "reasoning_gate", "failed"] += 1
        return counts

    monkeypatch.setattr(corpus_module, "day_check_counts", one_too_many)
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    result = dg.materialize([raw_firehose, *CORPUS_ASSETS, *CORPUS_CHECKS, leak_clusters], partition_key=tiny_day.day,
                            resources={"firehose": firehose, "lake": lake}, instance=dg.DagsterInstance.ephemeral(),
                            run_config=QUIET, raise_on_error=False)
    (failed,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "check_counts" and not e.passed]
    assert failed.asset_key.to_user_string() == "gated_traces"
    # the shared samples have one trace the gate fails, the synthetic lines (no ../shared) none
    counted, ledger = map(int, re.search(r"reasoning_gate/reasoning_gate failed: (\d+) counted by the checks, "
                                         r"(\d+) ledger rows", failed.description).groups())
    assert counted == ledger + 1
    assert not result.success
    assert "leak_clusters" not in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


# ---- the files read are raw_firehose's inventory ------------------------------------------------------


def test_the_day_reads_the_inventory_not_a_fresh_listing(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    run_corpus(tiny_day.day, firehose, lake, assets=[raw_firehose])
    (tiny_day.folder / "part-002-late.jsonl").write_bytes(tiny_day.lines["part-001.jsonl"][0])  # after the inventory

    result = run_corpus(tiny_day.day, firehose, lake, assets=[*CORPUS_ASSETS, *CORPUS_CHECKS])

    assert result.success and check_result(result).passed
    assert check_result(result).metadata["lines_read"].value == 7
    assert not set(lake.read_day("rejected_traces", tiny_day.day)["source_file"]) & {"part-002-late.jsonl"}
    (meta,) = [e.step_materialization_data.materialization.metadata for e in result.get_asset_materialization_events()
               if e.asset_key.to_user_string() == "normalized_traces"]
    assert meta["files"].value == 2 and meta["files_not_inventoried"].value == 1


def test_a_file_changed_since_the_inventory_fails_the_day(tiny_day, tmp_path):
    firehose = FirehoseResource(root=str(tiny_day.root))
    lake = LakeResource(root=str(tmp_path / "lake"))
    run_corpus(tiny_day.day, firehose, lake, assets=[raw_firehose])
    (tiny_day.folder / "part-001.jsonl").write_bytes(b"".join(tiny_day.lines["part-001.jsonl"][:2]))

    result = dg.materialize([*CORPUS_ASSETS], partition_key=tiny_day.day, resources={"firehose": firehose, "lake": lake},
                            instance=dg.DagsterInstance.ephemeral(), run_config=QUIET, raise_on_error=False)

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert "part-001.jsonl changed since raw_firehose inventoried it" in message and "re-run raw_firehose" in message
    assert not lake.has_day("gated_traces", tiny_day.day)


def test_a_day_without_an_inventory_says_what_to_run(tiny_day, tmp_path):
    result = dg.materialize([*CORPUS_ASSETS], partition_key=tiny_day.day,
                            resources={"firehose": FirehoseResource(root=str(tiny_day.root)),
                                       "lake": LakeResource(root=str(tmp_path / "lake"))},
                            instance=dg.DagsterInstance.ephemeral(), run_config=QUIET, raise_on_error=False)
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert f"materialize raw_firehose for {tiny_day.day} first" in failure.step_failure_data.user_failure_data.description
