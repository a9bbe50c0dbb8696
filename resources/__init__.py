"""One ConfigurableResource per outside system, swapped per environment (local folder, S3)."""

import os

os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")  # before pyarrow loads: see shopdistill_assets/__init__.py

from resources.firehose import FirehoseDayMissing, FirehoseFile, FirehoseResource
from resources.lake import LakePartMissing, LakeResource
from resources.s3 import parse_s3_uri

__all__ = [
    "FirehoseDayMissing",
    "FirehoseFile",
    "FirehoseResource",
    "LakePartMissing",
    "LakeResource",
    "parse_s3_uri",
]
