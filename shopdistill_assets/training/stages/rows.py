"""Canonical traces -> the rows TRL trainers read, as Arrow tables.

Canonical rows keep `messages` and `tools` as JSON text (the lake's contract). A training
snapshot stores `messages` as real conversational data instead, a list of structs that
`datasets.load_dataset("parquet", ...)` hands to `SFTTrainer` as it is; `tools` stays JSON
text (TRL parses it; as structs, Arrow would fill every tool's missing schema keys with nulls
and the rendered prompt would change) and so do tool-call `arguments`.

Three shapes, one per kind of trainer:
  SFT  `messages` (+ `tools`): the whole trajectory, loss on assistant turns only.
  KTO  `prompt` (messages before an assistant turn), `completion` ([that turn]), `label`.
  GRPO `prompt` (messages before an assistant turn) + the teacher's call at that step
       (`reference_name`, `reference_arguments`) and the problem, for the rewards.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from shopdistill_assets.corpus.messages import MESSAGES_TYPE, structured_messages

# Identity and provenance carried by every training row: what the train-side check reads and
# what lineage points back to.
ID_COLUMNS = [("trace_id", pa.string()), ("problem_id", pa.string()), ("query", pa.string()),
              ("category", pa.string()), ("source", pa.string())]
SFT_SCHEMA = pa.schema([*ID_COLUMNS, ("messages", MESSAGES_TYPE), ("tools", pa.large_string())])
KTO_SCHEMA = pa.schema([*ID_COLUMNS, ("step", pa.int64()), ("prompt", MESSAGES_TYPE),
                        ("completion", MESSAGES_TYPE), ("label", pa.bool_()), ("tools", pa.large_string())])
GRPO_SCHEMA = pa.schema([*ID_COLUMNS, ("step", pa.int64()), ("prompt", MESSAGES_TYPE),
                         ("reference_name", pa.string()), ("reference_arguments", pa.string()),
                         ("tools", pa.large_string())])


def _ids(row: dict[str, Any], source: str) -> dict[str, Any]:
    return {"trace_id": row.get("trace_id"), "problem_id": row.get("problem_id"), "query": row.get("query"),
            "category": row.get("category"), "source": source}


def sft_rows(traces: Iterable[dict[str, Any]], source: str) -> Iterator[dict[str, Any]]:
    """Canonical traces (messages/tools as JSON text) -> SFT rows."""
    for row in traces:
        yield {**_ids(row, source), "messages": structured_messages(row["messages"]), "tools": row["tools"]}


def assistant_steps(messages: list[dict[str, Any]]) -> Iterator[tuple[int, list[dict[str, Any]], dict[str, Any]]]:
    """(step number, the messages before it, the assistant turn) for each assistant turn."""
    step = 0
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            yield step, messages[:i], message
            step += 1


def kto_rows(traces: Iterable[dict[str, Any]], desirable: bool, source: str,
             max_steps_per_trace: int = 8) -> Iterator[dict[str, Any]]:
    """Unpaired per-step rows: each assistant turn is a completion of the dialogue before it.

    A trajectory's label applies to every step of it (the outcome is all we know); the last
    steps, where the recommendation is made, come first when a trajectory is capped."""
    for row in traces:
        steps = list(assistant_steps(structured_messages(row["messages"])))
        for step, prompt, turn in steps[-max_steps_per_trace:]:
            yield {**_ids(row, source), "step": step, "prompt": prompt, "completion": [turn], "label": desirable,
                   "tools": row["tools"]}


def prompt_chars(prompt: list[dict[str, Any]], tools: str | None) -> int:
    """A prompt's size in characters (text, think, arguments, tool schemas): TRL's GRPOTrainer
    does not truncate prompts, so the dataset bounds them."""
    size = len(tools or "")
    for m in prompt:
        size += len(m["content"] or "") + len(m["reasoning_content"] or "")
        size += sum(len(c["function"]["arguments"] or "") for c in m["tool_calls"] or [])
    return size


def grpo_rows(traces: Iterable[dict[str, Any]], source: str, max_steps_per_trace: int = 8,
              max_prompt_chars: int | None = None) -> Iterator[dict[str, Any]]:
    """Prompts at each assistant step of a successful (teacher) trajectory, with the call the
    teacher made there as the reference the step reward compares against; prompts longer than
    `max_prompt_chars` are left out (a trajectory's later steps carry every tool result)."""
    for row in traces:
        for step, prompt, turn in list(assistant_steps(structured_messages(row["messages"])))[:max_steps_per_trace]:
            calls = turn["tool_calls"] or []
            if not calls or (max_prompt_chars is not None and prompt_chars(prompt, row["tools"]) > max_prompt_chars):
                continue
            yield {**_ids(row, source), "step": step, "prompt": prompt,
                   "reference_name": calls[0]["function"]["name"],
                   "reference_arguments": calls[0]["function"]["arguments"], "tools": row["tools"]}


def to_table(rows: Iterable[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    rows = list(rows)
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
