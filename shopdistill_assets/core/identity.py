"""One rule for a problem's identity: its `problem_key`.

A problem is known by the record's own `problem_id` when it has one (a non-empty string; one
longer than 256 characters is replaced by a digest of itself), else by a digest of its
normalized query text. Every place that says "the same problem" uses this key:
`leak_clusters` stores it in its `problem_id` column; `split_traces` and `train_corpus` join
traces to their side on it; `heldout_eval_set` rows carry it as `problem_id` (the suite's own
id, which a firehose record need not share, is kept in `suite_problem_id`); `policy_eval`
records the keys it scored, and `not_stale` looks them up in the latest `leak_clusters`.

A problem id is never trusted for its type or size: anything that is not a string counts as
absent.
"""

from __future__ import annotations

import hashlib

from shopdistill_assets.core.canonical import text_key

MAX_ID_CHARS = 256
MAX_QUERY_CHARS = 65_536  # as the ledger truncates raw lines: a real problem is far shorter


def problem_key(problem_id: object, query: object) -> str:
    """The identity of a problem given a record's problem_id and query."""
    pid = problem_id if isinstance(problem_id, str) else ""
    if not pid:
        text = query[:MAX_QUERY_CHARS] if isinstance(query, str) else ""
        return "q_" + hashlib.sha1(text_key(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if len(pid) > MAX_ID_CHARS:
        return "p_" + hashlib.sha1(pid.encode("utf-8", "surrogatepass")).hexdigest()
    return pid


def problem_keys(problem_ids: list[object], queries: list[object]) -> list[str]:
    """`problem_key` of each (problem_id, query) pair, e.g. of two columns of a table."""
    return [problem_key(p, q) for p, q in zip(problem_ids, queries, strict=True)]
