"""The ShoppingBench-style world: catalog, search index, tools and the validator's scorer."""

from shopdistill_assets.sandbox.catalog import Catalog, load_catalog, write_catalog
from shopdistill_assets.sandbox.problems import Problem, load_suite, write_suite
from shopdistill_assets.sandbox.scorer import ScoreResult, score_recommendation, score_trace_calls
from shopdistill_assets.sandbox.search import SearchIndex
from shopdistill_assets.sandbox.tools import Sandbox, ToolResult

__all__ = [
    "Catalog",
    "Problem",
    "Sandbox",
    "ScoreResult",
    "SearchIndex",
    "ToolResult",
    "load_catalog",
    "load_suite",
    "score_recommendation",
    "score_trace_calls",
    "write_catalog",
    "write_suite",
]
