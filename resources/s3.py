"""S3 addressing, client construction and listing, shared by every S3 user of the project.

Both talk to S3 through plain boto3 (endpoint_url makes any S3-compatible store work, moto's
server on loopback in tests). s3fs is not used: its current releases pin botocore below the
boto3 this project installs.
"""

from __future__ import annotations

from typing import Any

import boto3
from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

S3_SCHEME = "s3://"


def is_s3_uri(root: str) -> bool:
    return root.startswith(S3_SCHEME)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split `s3://bucket/some/prefix/` into ("bucket", "some/prefix"); the prefix has no
    leading or trailing slash and is "" for a bare bucket."""
    if not is_s3_uri(uri):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, prefix = uri[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"s3 URI without a bucket: {uri!r}")
    return bucket, prefix.strip("/")


def join_key(prefix: str, *parts: str) -> str:
    """Object key under `prefix` (which may be "")."""
    return "/".join(p for p in (prefix, *parts) if p)


def list_objects(client: Any, bucket: str, prefix: str) -> list[dict]:
    """Every object whose key starts with `prefix`, as list_objects_v2 gives it (Key, Size,
    ETag, LastModified), in key order, all pages. Pass a prefix ending in "/" for a folder's
    objects: "a/b" also matches "a/bc"."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [obj for page in pages for obj in page.get("Contents", [])]


def list_prefixes(client: Any, bucket: str, prefix: str) -> list[str]:
    """The names of the "folders" right under `prefix` (a folder: "" or ending in "/"): the
    common prefixes of a "/"-delimited listing, `prefix` and the trailing "/" cut off."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
    return [cp["Prefix"][len(prefix):].rstrip("/") for page in pages for cp in page.get("CommonPrefixes", [])]


def any_object(client: Any, bucket: str, prefix: str) -> bool:
    """Whether some object's key starts with `prefix` (one key listed, at most)."""
    return bool(client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount"))


def make_s3_client(
    endpoint_url: str | None = None,
    region_name: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
) -> Any:
    """A boto3 S3 client; credentials left None fall back to boto3's usual chain (env, profile,
    instance role)."""
    session = boto3.session.Session(
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        region_name=region_name,
    )
    return session.client("s3", endpoint_url=endpoint_url)


class S3Access(ConfigurableResource):
    """Connection settings for resources whose `root` may be an `s3://` URI."""

    endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint, e.g. http://127.0.0.1:5000 for moto"
    )
    region_name: str | None = Field(default=None, description="AWS region; None: boto3's default")
    aws_access_key_id: str | None = Field(default=None, description="None: boto3's chain")
    aws_secret_access_key: str | None = Field(default=None, description="None: boto3's chain")
    aws_session_token: str | None = Field(default=None, description="None: boto3's chain")

    _client: Any = PrivateAttr(default=None)

    def s3_client(self) -> Any:
        # boto3 clients are thread-safe and costly to build: one per resource instance.
        if self._client is None:
            self._client = make_s3_client(
                endpoint_url=self.endpoint_url,
                region_name=self.region_name,
                aws_access_key_id=self.aws_access_key_id,
                aws_secret_access_key=self.aws_secret_access_key,
                aws_session_token=self.aws_session_token,
            )
        return self._client
