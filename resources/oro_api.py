"""ORO's public SN15 API (through `oro-sdk`) and the landing zone the oro_api source writes.

Settings come from `EnvVar`s (definitions.py): SHOPDISTILL_ORO_API_URL (default
https://api.oroagents.com), SHOPDISTILL_ORO_API_KEY (optional bearer token; the public
endpoints need none) and SHOPDISTILL_ORO_LANDING (default `<firehose root>/_oro_landing`,
beside the day folders and never read as one). The key is only ever handed to the SDK's
client: it is not in any metadata, log line, landing file or lake table.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from resources.oro_client import IngestConfig, OroApi, RetryPolicy, build_sdk_client

DEFAULT_BASE_URL = "https://api.oroagents.com"
LANDING_FOLDER = "_oro_landing"


class OroApiResource(ConfigurableResource):
    base_url: str = Field(default=DEFAULT_BASE_URL, description="ORO API base URL")
    api_key: str | None = Field(default=None, description="bearer token, if the deployment has one")
    landing_root: str | None = Field(
        default=None, description="landing zone (folder or s3://); None: <firehose root>/_oro_landing")
    timeout_s: float = Field(default=30.0, description="per call: connect, read, write, pool wait")
    max_retries: int = Field(default=4, description="retries of a 429, a 5xx or a dropped connection")
    max_backoff_s: float = Field(default=30.0, description="longest wait between tries (Retry-After included)")
    concurrency: int = Field(default=8, description="calls in flight at once")
    race_lookback_days: int = Field(default=2, description="races that ended this many days before still count")

    def api(self) -> OroApi:
        client = build_sdk_client(self.base_url, self.api_key, self.timeout_s)
        policy = RetryPolicy(max_retries=self.max_retries, max_delay_s=self.max_backoff_s)
        return OroApi(client, policy, timeout_s=self.timeout_s)

    def ingest_config(self) -> IngestConfig:
        return IngestConfig(concurrency=self.concurrency, race_lookback_days=self.race_lookback_days)

    def landing_for(self, firehose_root: str) -> str:
        if self.landing_root:
            return self.landing_root
        return firehose_root.rstrip("/") + "/" + LANDING_FOLDER
