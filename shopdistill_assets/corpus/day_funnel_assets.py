"""corpus_funnel: the corpus funnel of every day in the lake, as one asset's metadata.

    normalized / agentic / subtask / gated / rejected_traces (all days) ─► corpus_funnel

Read from the lake's tables (row counts, and the ledger's stage and reason counts per day), so it
shows what the lake holds, whichever run wrote it. Days that have not arrived are not rows.
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import hashlib
import json

import pyarrow as pa
from dagster import (
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from resources.lake import LakeResource
from shopdistill_assets.corpus.day_funnel import (
    HEADER,
    TABLES,
    DayCounts,
    funnel_png,
    png_markdown,
    reasons_long,
)
from shopdistill_assets.corpus.lake_sql import connect

FUNNEL_ASSET = "corpus_funnel"


def day_counts(lake: LakeResource) -> list[DayCounts]:
    con, present = connect(lake)
    days: dict[str, DayCounts] = {}
    for day in lake.list_days("raw_firehose"):
        days[day] = DayCounts(day)
    for table in TABLES:
        for day in lake.list_days(table):  # a day whose table is empty still has it
            days.setdefault(day, DayCounts(day)).tables[table] = 0
        if table in present:
            for day, n in con.sql(f'SELECT lake_day, count(*) FROM "{table}" GROUP BY 1').fetchall():
                days.setdefault(day, DayCounts(day)).tables[table] = n
    if "rejected_traces" in present:
        for day, stage, reason, n in con.sql(
                "SELECT lake_day, stage, reason, count(*) FROM rejected_traces GROUP BY ALL").fetchall():
            d = days.setdefault(day, DayCounts(day))
            d.stages[stage] = d.stages.get(stage, 0) + n
            d.reasons[reason] = d.reasons.get(reason, 0) + n
    return [days[k] for k in sorted(days)]


def typed_table(rows: list[dict], columns: dict[str, str]) -> MetadataValue:
    """Dagster's table metadata: the UI shows it as a real table (typed columns, scrolls when
    wide) instead of a markdown block clipped at the panel's width."""
    schema = TableSchema(columns=[TableColumn(name, kind) for name, kind in columns.items()])
    return MetadataValue.table([TableRecord({k: r.get(k) for k in columns}) for r in rows], schema=schema)


FUNNEL_COLUMNS = {name: ("string" if name == "day" else "int") for name in HEADER}
REASON_COLUMNS = {"day": "string", "stage": "string", "reason": "string", "lines": "int"}


@asset(group_name="reports", kinds={"python", "duckdb"}, code_version="1",
       deps=["normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces"],
       description="The corpus funnel of every day in the lake: a table (lines, traces, agentic, sub-task, "
                   "gated, rejected by stage) and a plot across days.")
def corpus_funnel(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    days = day_counts(lake)
    complete = [d for d in days if d.complete]
    table = pa.Table.from_pylist([dict(zip(HEADER, d.row())) for d in days]) if days else pa.table({"day": pa.array([], pa.string())})
    content = hashlib.sha256(json.dumps([d.row() for d in days]).encode()).hexdigest()
    version = f"v{days[-1].day.replace('-', '') if days else 'empty'}-{content[:12]}"
    lake.write_snapshot(FUNNEL_ASSET, version, table, {"asset": FUNNEL_ASSET, "version": version, "days": len(days)})
    png = funnel_png(days)
    context.log.info(f"funnel over {len(days)} days ({len(complete)} complete)")
    totals = {k: sum((d.tables.get(t) or 0) for d in complete) for k, t in
              (("gated", "gated_traces"), ("subtask", "subtask_traces"), ("rejected", "rejected_traces"))}
    return MaterializeResult(metadata={
        "dagster/row_count": len(days),
        "days": len(days),
        "incomplete_days": len(days) - len(complete),
        "lines": sum(d.lines for d in complete),
        **totals,
        "funnel": typed_table([dict(zip(HEADER, d.row())) for d in days], FUNNEL_COLUMNS),
        "plot": MetadataValue.md(png_markdown(png)),
        "reasons_by_day": typed_table(reasons_long(days), REASON_COLUMNS),
        "version": version,
    })


FUNNEL_ASSETS = [corpus_funnel]
