"""Which side of the leak split a problem is on, for rows of training inputs.

A training row names its problem by (problem_id, query). It is on the train side only when
the newest `leak_clusters` day files it (by its one identity, `core.identity.problem_key`, or
failing that by the exact-duplicate text key of its query: a suite id the firehose did not use)
under a cluster whose side is `train`. Anything else
(`heldout`, `excluded`, or a problem the index never saw: `unknown`) must not be trained on.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from shopdistill_assets.core.canonical import text_key
from shopdistill_assets.core.identity import problem_key


def problem_sides(problems: pl.DataFrame, leak: pl.DataFrame) -> pl.DataFrame:
    """problems: problem_id, query -> the same rows with `side` (train | heldout | excluded | unknown)
    and the matched `leak_cluster_id`. leak: a `leak_clusters` day (problem_id, query, side, ...)."""
    by_key = {pid: (side, cluster) for pid, side, cluster in
              leak.select("problem_id", "side", "leak_cluster_id").iter_rows()}
    by_text: dict[str, tuple[str, str]] = {}
    for query, side, cluster in leak.select("query", "side", "leak_cluster_id").iter_rows():
        key = text_key(query)
        # one text on two sides cannot happen (exact keys are one cluster); the stricter side wins anyway
        if key and (key not in by_text or by_text[key][0] == "train"):
            by_text[key] = (side, cluster)
    sides, clusters = [], []
    for pid, query in problems.select("problem_id", "query").iter_rows():
        hit = by_key.get(problem_key(pid, query)) or by_text.get(text_key(query))
        sides.append(hit[0] if hit else "unknown")
        clusters.append(hit[1] if hit else None)
    return problems.with_columns(pl.Series("side", sides, dtype=pl.String),
                                 pl.Series("leak_cluster_id", clusters, dtype=pl.String))


def not_train_side(problems: pl.DataFrame, leak: pl.DataFrame) -> pl.DataFrame:
    """The distinct problems of `problems` that are not on the train side, with their side."""
    distinct = problems.select("problem_id", "query").unique(maintain_order=True)
    return problem_sides(distinct, leak).filter(pl.col("side") != "train")


def train_side_truths(leak: pl.DataFrame, ground_truth: Any) -> list[tuple[Any, str, str, str]]:
    """The train side of a `leak_clusters` day matched to suite problems with ground truth:
    (suite problem, the leak row's problem_id, its leak_cluster_id, its first_day), one per suite
    problem (its first phrasing, in cluster order). `ground_truth`: a `split.heldout.GroundTruth`.
    What `train_problems` writes and what the arena base's recommend phase plays (no held-out problem).

    A suite problem is found by a train-side row's key or text, and is kept only when its own
    identity (its id and query, as the held-out set names it) is on the train side too: a split
    whose exact keys and texts agree never differs, one that does not (hostile or hand-edited
    input) loses the problem rather than trains on it."""
    train = leak.filter(pl.col("side") == "train").sort(["leak_cluster_id", "first_day", "problem_id"])
    found, seen = [], set()
    for leak_problem, query, cluster, first_day in train.select(
            "problem_id", "query", "leak_cluster_id", "first_day").iter_rows():
        truth = ground_truth.find(leak_problem, query)
        if truth is None or truth.problem_id in seen:
            continue
        seen.add(truth.problem_id)
        found.append((truth, leak_problem, cluster, first_day))
    own = pl.DataFrame({"problem_id": [t.problem_id for t, *_ in found], "query": [t.query for t, *_ in found]},
                       schema={"problem_id": pl.String, "query": pl.String})
    sides = problem_sides(own, leak)["side"].to_list()
    return [match for match, side in zip(found, sides, strict=True) if side == "train"]
