"""oro_api_day[day]: one UTC day of ORO's public API landed, and written as a firehose day.

The work is `oro_day.land_day` (plain Python); this asset wires the resources and reports.
Downstream, `raw_firehose[day]` inventories the day file it wrote like any other (it declares
the dependency), and the firehose sensor starts the corpus run when the file
appears or changes. `oro_api_day_sensor` asks for the recent days again every hour: a day
with artifacts not released yet failed (nothing half-written) and is retried then, and a
re-judged result of a recent day lands as a new version.
"""

# No `from __future__ import annotations`: Dagster reads the annotations at decoration time.
import datetime as dt
import json

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    DataVersion,
    DefaultSensorStatus,
    Failure,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    asset,
    define_asset_job,
    sensor,
)

from resources.firehose import FirehoseResource
from resources.oro_api import OroApiResource
from resources.oro_client import OroApiError
from resources.s3 import is_s3_uri
from shopdistill_assets.ingest.oro_day import MANIFEST, DayIncomplete, DayLanding, land_day
from shopdistill_assets.ingest.oro_store import Store
from shopdistill_assets.partitions import daily_partitions

ORO_API_DAY = "oro_api_day"
RECHECK_DAYS = 3  # how many ended days the sensor keeps asking for
RECHECK_SECONDS = 3600


def stores(oro_api: OroApiResource, firehose: FirehoseResource) -> tuple[Store, Store]:
    """(landing, firehose) stores; S3 roots share the firehose resource's client settings."""
    def store(root: str) -> Store:
        return Store(root, s3_client=firehose.s3_client() if is_s3_uri(root) else None)

    return store(oro_api.landing_for(firehose.root)), store(firehose.root)


def _counts_markdown(landing: DayLanding, api_counts: dict) -> str:
    rows = ["| what | count |", "|---|---:|"]
    rows += [f"| {k} | {v} |" for k, v in sorted({**landing.counts, **api_counts}.items())]
    return "\n".join(rows)


@asset(
    partitions_def=daily_partitions,
    code_version="1",
    group_name="oro_api",
    kinds={"python", "s3"},
    description="One UTC day of SN15 problem runs from ORO's public API (oro-sdk): EVAL_PROBLEM_LOGS "
    "artifacts landed byte for byte with sha256, and one joined sn15.problem_run/v1 line per "
    "problem run written as the firehose day (data version = the day file's sha256).",
)
def oro_api_day(context: AssetExecutionContext, oro_api: OroApiResource, firehose: FirehoseResource) -> MaterializeResult:
    day = context.partition_key
    landing_store, firehose_store = stores(oro_api, firehose)
    api = oro_api.api()
    try:
        landing = land_day(api, landing_store, firehose_store, day, oro_api.ingest_config())
    except DayIncomplete as exc:
        raise Failure(description=str(exc), metadata={"day": day, "api_calls": json.dumps(dict(api.stats.counts))},
                      allow_retries=True) from None
    except OroApiError as exc:
        raise Failure(description=str(exc), metadata={"day": day}, allow_retries=False) from None
    finally:
        api.close()
    context.log.info(f"{day}: {landing.counts['lines']} problem-run lines → {landing.day_file}"
                     f" ({'written' if landing.day_file_written else 'unchanged'})")
    return MaterializeResult(
        metadata={
            "dagster/row_count": landing.counts["lines"],
            "results_of_day": landing.counts["results/of_day"],
            "fetched": landing.counts["artifacts/fetched"],
            "already_landed": landing.counts["artifacts/already_landed"],
            "artifacts_not_found": landing.counts["artifacts/not_found"],
            "day_file_written": landing.day_file_written,
            "counts": MetadataValue.md(_counts_markdown(landing, dict(api.stats.counts))),
            "day_file": MetadataValue.path(landing.day_file),
            "day_file_sha256": landing.day_file_sha256,
        },
        data_version=DataVersion(landing.day_file_sha256),
    )


oro_api_daily_job = define_asset_job(
    "oro_api_daily", selection=AssetSelection.assets(ORO_API_DAY),
    description="Land one UTC day from ORO's public API as a firehose day.",
)


def days_to_ask(today: dt.date, is_partition) -> list[str]:
    """The last RECHECK_DAYS ended days; each asked again until the API has nothing new."""
    days = [(today - dt.timedelta(days=n)).isoformat() for n in range(1, RECHECK_DAYS + 1)]
    return [d for d in days if is_partition(d)]


def _complete(landing: Store, day: str) -> bool:
    raw = landing.read(f"day={day}/{MANIFEST}")
    return bool(raw) and json.loads(raw).get("complete") is True


# Stopped by default: it calls an outside API, which a deployment turns on on purpose.
@sensor(job=oro_api_daily_job, minimum_interval_seconds=300, default_status=DefaultSensorStatus.STOPPED,
        description="oro_api_day for each of the last few ended UTC days, once an hour (retries incomplete days, "
                    "lands re-judged results).")
def oro_api_day_sensor(context: SensorEvaluationContext, oro_api: OroApiResource,
                       firehose: FirehoseResource) -> SensorResult:
    now = dt.datetime.now(dt.timezone.utc)
    landing, _ = stores(oro_api, firehose)
    bucket = int(now.timestamp() // RECHECK_SECONDS)
    requests = [RunRequest(run_key=f"{day}@{bucket}", partition_key=day,
                           tags={"shopdistill/trigger": "oro_api_day_sensor",
                                 "shopdistill/day_complete": str(_complete(landing, day)).lower()})
                for day in days_to_ask(now.date(), daily_partitions.has_partition_key)]
    return SensorResult(run_requests=requests)
