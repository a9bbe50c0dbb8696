"""What every dialect reader shares: dialect names, the canonical row, type-distrusting
accessors, the id/time/score helpers, and the rejections for a bad shape."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from typing import Any, TypedDict

import orjson

from shopdistill_assets.core import formats
from shopdistill_assets.corpus.reasons import Reason, Rejection
from shopdistill_assets.sandbox.tool_specs import TOOL_SCHEMAS

ROLLOUT = "shoppingbench.rollout"
OPENAI = "openai.messages"
# What ORO itself writes, before the validator's result is joined to it: the sandbox's
# output.jsonl line per problem (status, dialogue, timing) and the per-problem upload
# (subnet/validator/output_split.py: the bare list of steps).
ORO_ENVELOPE = "oro.sandbox_output"
ORO_UPLOAD = "oro.upload"
# ORO's generated-environment episodes: recognized and counted, but they hold no shopping dialogue.
ORO_EPISODE = "oro.environment_episode.v1"
# The run outcomes ORO records (oro_sdk ProblemStatus); only SUCCESS is a finished run.
FINISHED_STATUS = "SUCCESS"

# Fixed system prompt of primary-dialect traces: the record does not carry the agent's own
# prompt, and one shared prompt lets the student learn the tools, not a miner's wording. The
# evaluation rollouts use the same prompt, so a checkpoint is scored on what it was trained on.
SYSTEM_PROMPT = """You are a shopping assistant for an online marketplace where prices are in PHP. \
The user describes what they want to buy. Find the product or products that satisfy every \
requirement and recommend them.

How to work:
1. Before each action, think: restate the requirements (product type, brand, price range, \
attributes such as color, size or capacity, services such as official, freeShipping, COD or \
flashsale, and any same-shop, budget or voucher conditions).
2. Search with find_product. Short keyword queries work best; narrow with the price, sort, \
service and shop_id filters; results come 10 to a page, up to page 5.
3. Check promising candidates with view_product_information (descriptions, attributes and sku \
options; price and shop come from the search results) and compare them before deciding.
4. For budgets and vouchers, compute basket totals with calculate_voucher or python_execute and \
make sure the total fits the budget, directly or after the voucher.
5. When the user asks for several products, recommend them in the order the request lists \
them; when they must come from the same shop, all must share one shop_id.
6. Call recommend_product once with the chosen product ids, comma-separated, then call \
terminate.

Ground every decision in tool results: cite the product ids, prices and attributes you saw, and \
never invent a product id. Act only through tool calls."""

_TOOL_JSON: dict[str, str] = {name: orjson.dumps(s).decode() for name, s in TOOL_SCHEMAS.items()}
# Tools whose calls go to the validator's proxy as /search/* (the structural evidence): the two
# catalogue tools and ORO's helpers built on them (check_product_match views one product,
# find_products_in_same_shop searches shop by shop). calculate_voucher runs in the agent itself.
CATALOGUE_TOOLS = frozenset(
    {"find_product", "view_product_information", "check_product_match", "find_products_in_same_shop"}
)


PRIMARY = formats.PRIMARY  # the primary dialect, named where more than one part needs it
class CanonicalTrace(TypedDict):
    """One normalized row (HELPERS-BRIEF "Canonical trace row"); JSON columns are text."""

    trace_id: str
    eval_run_id: str | None
    problem_id: str | None
    miner_hotkey: str | None
    validator_hotkey: str | None
    agent_version_id: str | None
    race_id: int | None
    suite_id: int | None
    phase: str | None
    status: str | None
    category: str | None
    difficulty: str | None
    query: str
    score: float | None
    reasoning_score: float | None
    reasoning_coef: float | None
    execution_time: float | None
    inference_total: int | None
    inference_failure_count: int | None
    n_steps: int
    n_tool_calls: int
    updated_at: str | None
    dialect: str
    day: str
    source_file: str
    source_line: int
    messages: str
    tools: str
    proxy_evidence: str | None


CANONICAL_COLUMNS: tuple[str, ...] = tuple(CanonicalTrace.__annotations__)
# Per-record work limits (reason `over_limit`): far above any real run (ORO allows 25 steps,
# queries are under 1,000 characters), low enough that no single line costs unbounded work.
MAX_STEPS = 256
MAX_MESSAGES = 1024
MAX_TOOL_CALLS = 1024
MAX_QUERY_CHARS = 8192


# ---- small, type-distrusting accessors -------------------------------------------------


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _int(v: Any) -> int | None:
    return v if type(v) is int and _I64_MIN <= v <= _I64_MAX else None  # bool is not int here


def _float(v: Any) -> float | None:
    if type(v) is float:  # the common case first; x - x is 0.0 exactly when x is finite
        return v if v - v == 0.0 else None
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _dumps(v: Any) -> str | None:
    """JSON text, or None where orjson refuses (nesting deeper than it writes)."""
    try:
        return orjson.dumps(v).decode()
    except orjson.JSONEncodeError:
        return None


def _violation(detail: str) -> Rejection:
    return Rejection.of(Reason.DIALECT_VIOLATION, detail)


def _bad_type(path: str, v: Any) -> Rejection:
    return Rejection.of(Reason.BAD_FIELD_TYPE, f"{path} is {type(v).__name__}")


def _over_limit(what: str, n: int, limit: int) -> Rejection:
    return Rejection.of(Reason.OVER_LIMIT, f"{what} {n} > {limit}")


def failed_run(status: Any, dialogue: Any) -> Rejection | None:
    """`failed_run` for a run ORO did not finish (FAILED, TIMED_OUT, SKIPPED, PENDING, RUNNING),
    whatever its dialogue holds: the validator scores it 0 and never judges it."""
    if status is None or status == FINISHED_STATUS:
        return None
    steps = len(dialogue) if isinstance(dialogue, list) else 0
    return Rejection.of(Reason.FAILED_RUN, f"status={str(status)[:40]}, {steps} steps")


def _query_over_limit(query: str) -> Rejection | None:
    return _over_limit("query characters", len(query), MAX_QUERY_CHARS) if len(query) > MAX_QUERY_CHARS else None


# ---- ids, times, scores, thinks, tools ---------------------------------------------------


def make_trace_id(*parts: str) -> str:
    """Deterministic trace id: "t_" + first 16 hex of sha1 over the \\x1f-joined parts."""
    return "t_" + hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_updated_at(v: Any) -> str | None:
    """ISO 8601 -> "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" in UTC; naive times are taken as UTC; bad -> None."""
    if not isinstance(v, str) or not (10 <= len(v) <= 40):
        return None
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        return None
    if len(v) == 20 and v[10] == "T" and v[19] == "Z":
        return v  # already the canonical shape, and valid
    if dt.tzinfo is not None:
        try:
            dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:  # e.g. year 1 at +01:00 is before the first representable time
            return None
    return dt.isoformat() + "Z"


def reasoning_coef(q: float | None) -> float | None:
    """The validator's reasoning coefficient: 1.0 if q >= 0.8 else 0.3 + 0.875 q."""
    if q is None:
        return None
    return 1.0 if q >= 0.8 else 0.3 + 0.875 * q


def split_think(content: str) -> tuple[str, str]:
    """("think", "rest") from a "<think>…</think>rest" content; ("", content) otherwise."""
    start = content.find("<think>")
    if start < 0 or content[:start].strip():
        return "", content
    end = content.find("</think>", start)
    if end < 0:
        return "", content
    return content[start + 7 : end].strip(), content[end + 8 :].strip()


_TOOLS_JSON_CACHE: dict[frozenset, str] = {}  # a day's traces use a few dozen tool sets


def tools_json(names: set[str] | list[str]) -> str:
    """The `tools` column for these tool names, in TOOL_SCHEMAS order (unknown names left out)."""
    key = frozenset(names)
    text = _TOOLS_JSON_CACHE.get(key)
    if text is None:
        text = "[" + ",".join(_TOOL_JSON[n] for n in TOOL_SCHEMAS if n in key) + "]"
        if len(_TOOLS_JSON_CACHE) < 4096:  # names are miner-controlled: bounded
            _TOOLS_JSON_CACHE[key] = text
    return text


def _content_digest(obj: Any) -> str:
    """Record id for records that carry none: a hash of their content (a re-upload is the same)."""
    try:
        data = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        data = repr(type(obj)).encode() + str(len(obj) if hasattr(obj, "__len__") else 0).encode()
    return hashlib.sha1(data).hexdigest()
