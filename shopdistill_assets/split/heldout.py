"""Reading problems to evaluate on: a `heldout_eval_set` snapshot or plain suite files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from shopdistill_assets.sandbox import Problem, load_suite

HELDOUT_ASSET = "heldout_eval_set"

# The columns of a held-out snapshot, all text.
HELDOUT_COLUMNS = ("problem_id", "suite_problem_id", "query", "category", "difficulty", "reward_json", "voucher_json",
                   "leak_cluster_id")


def problems_to_rows(problems: list[Problem]) -> list[dict]:
    """The columns a held-out snapshot stores per problem (ground truth as JSON text)."""
    return [{"problem_id": p.problem_id, "query": p.query, "category": p.category, "difficulty": p.difficulty,
             "reward_json": json.dumps(list(p.reward), sort_keys=True),
             "voucher_json": json.dumps(p.voucher, sort_keys=True) if p.voucher else None} for p in problems]


def heldout_row(truth: Problem, problem_key: str, leak_cluster_id: str) -> dict:
    """A held-out snapshot row: the problem under its one identity (`core.identity.problem_key`,
    as leak_clusters files it), with the ground truth of the suite problem that matched it."""
    row = problems_to_rows([truth])[0]
    return {**row, "problem_id": problem_key, "suite_problem_id": truth.problem_id, "leak_cluster_id": leak_cluster_id}


class GroundTruth:
    """Suite problems (with ground truth) found for the problems a leak_clusters day files: by the
    problem's key when a suite uses the same id, else by the exact text key of its query. The one
    rule both the held-out set and the train-side rollout problems use."""

    def __init__(self, problems: list[Problem]) -> None:
        from shopdistill_assets.core.canonical import text_key

        self._text_key = text_key
        self.by_id = {p.problem_id: p for p in problems}
        self.by_text = {text_key(p.query): p for p in problems}

    def find(self, problem_key: str, query: str) -> Problem | None:
        return self.by_id.get(problem_key) or self.by_text.get(self._text_key(query))


def rows_to_problems(rows: list[dict]) -> list[Problem]:
    out = []
    for row in rows:
        reward = json.loads(row["reward_json"])
        out.append(Problem.from_dict({
            "problem_id": row["problem_id"], "query": row["query"], "category": row["category"],
            "difficulty": row.get("difficulty") or "",
            "reward": reward[0] if row["category"] == "Product" else reward,
            "voucher": json.loads(row["voucher_json"]) if row.get("voucher_json") else None,
        }))
    return out


def load_problems(path: Path) -> list[Problem]:
    """A snapshot folder (parquet), a folder of suite files, or one suite file."""
    path = Path(path)
    if path.is_dir():
        parts = sorted(path.glob("*.parquet"))
        if parts:
            import polars as pl

            return rows_to_problems(pl.concat([pl.read_parquet(p) for p in parts]).to_dicts())
        files = sorted(p for p in path.glob("*.json*") if p.name != "latent.json")
        if not files:
            raise FileNotFoundError(f"no suite files or parquet parts in {path}")
        return [p for f in files for p in load_suite(f)]
    if not path.exists():
        raise FileNotFoundError(f"no held-out set at {path}")
    return load_suite(path)


def newest_heldout_version(versions: list[str], as_of_day: Callable[[str], str]) -> str | None:
    """The snapshot built on the latest leak_clusters day (ties: the greatest version)."""
    return max(versions, key=lambda v: (as_of_day(v), v), default=None)
