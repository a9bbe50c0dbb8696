"""The checkpoint store as a Dagster resource (a local folder or S3), and the base model."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from resources.checkpoint_store import CheckpointStore

TINY_BASE = "tiny-qwen3"  # built offline on first use: what the demo and the tests train


class CheckpointStoreResource(ConfigurableResource):
    """`ROOT/<stage>/<version>/` checkpoints with lineage; `base_model` starts the chain."""

    root: str = Field(description="checkpoint root: a folder or s3://bucket/prefix")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint for s3:// roots")
    base_model: str = Field(default=TINY_BASE, description="what the sft stage starts from: a Hugging Face id "
                            f"(Qwen/Qwen3-4B), a local checkpoint folder, or {TINY_BASE!r} (a tiny random Qwen3 "
                            "built offline, for the demo and tests)")
    cache_dir: str | None = Field(default=None, description="where S3 checkpoints are downloaded for serving")

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.root, endpoint_url=self.endpoint_url, cache_dir=self.cache_dir)
