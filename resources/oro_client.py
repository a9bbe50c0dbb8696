"""ORO's public API through `oro-sdk`: retries, timeouts and one-line errors around its calls.

Plain Python, no Dagster. Every call goes through the SDK's generated `sync_detailed`
functions (the SDK owns the paths, the parameters and the models); this module only decides
what to do with a status: retry 429 and 5xx with the SDK's own backoff (`compute_delay`,
which lets `Retry-After` win), and turn auth, not-found and not-yet-released answers into
exceptions whose message is the whole story. Presigned artifact downloads go to S3 (or
whatever the URL names) with a plain httpx client that never carries the API's credentials.

Our own retry loop instead of the SDK's `RetryTransport`: that transport never retries a
response to a POST, and the artifact download-url endpoint is a POST that is safe to repeat.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

import httpx
from oro_sdk import AuthenticatedClient, Client, get_error_code, get_error_detail
from oro_sdk.retry import compute_delay, parse_retry_after

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
NOT_RELEASED_CODES = frozenset({"ARTIFACT_NOT_RELEASED", "RACE_IN_FLIGHT"})
MAX_ARTIFACT_BYTES = 64 << 20  # one problem's logs; far above a real one (~13 KB)


@dataclass(frozen=True)
class IngestConfig:
    """How a day is fetched from ORO's API: parallel requests, race window, page size."""

    concurrency: int = 8
    race_lookback_days: int = 2  # races that ended this long before the day still count
    page_size: int = 50


class OroApiError(RuntimeError):
    """The API did not answer usefully (retries spent, unexpected status or shape)."""


class OroAuthError(OroApiError):
    """401/403 that is not a race embargo: the credentials are missing or refused."""


class OroNotFound(OroApiError):
    """404: the thing asked for does not exist (error_code says which kind)."""

    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        self.code = code


class ArtifactNotReleased(OroApiError):
    """The artifact exists but is embargoed for now (ARTIFACT_NOT_RELEASED, RACE_IN_FLIGHT)."""


@dataclass
class CallStats:
    """What the calls cost, for the asset's metadata (counters only: nothing secret)."""

    counts: Counter = field(default_factory=Counter)
    _lock: Lock = field(default_factory=Lock, repr=False)

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0  # a longer Retry-After is capped here, then retried


def build_sdk_client(base_url: str, api_key: str | None, timeout_s: float) -> Client | AuthenticatedClient:
    """An SDK client with a timeout on connect, read, write and pool wait alike."""
    timeout = httpx.Timeout(timeout_s)
    if api_key:
        return AuthenticatedClient(base_url=base_url, token=api_key, timeout=timeout)
    return Client(base_url=base_url, timeout=timeout)


class OroApi:
    """One SDK client plus the retry rule; thread-safe (httpx clients are)."""

    def __init__(self, client: Client | AuthenticatedClient, policy: RetryPolicy | None = None,
                 timeout_s: float = 30.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.policy = policy or RetryPolicy()
        self.stats = CallStats()
        self._sleep = sleep
        # No auth header, no cookies: a presigned URL carries its own signature.
        self._downloads = httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False)

    def close(self) -> None:
        self._downloads.close()
        self.client.get_httpx_client().close()

    def call(self, what: str, endpoint: Any, **kwargs: Any) -> Any:
        """`endpoint.sync_detailed(client, **kwargs)` with retries; the parsed 200 model, or an
        exception naming `what` (a path with ids, never a credential)."""
        try:
            response = self._with_retries(what, lambda: endpoint.sync_detailed(client=self.client, **kwargs))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # the SDK's from_dict refused it
            raise OroApiError(f"{what}: the answer is not in oro-sdk's shape ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:200]})") from None
        status = int(response.status_code)
        if status == 200 and response.parsed is not None:
            return response.parsed
        code = get_error_code(response.parsed)
        detail = get_error_detail(response.parsed) or response.content[:200].decode("utf-8", "replace")
        if code in NOT_RELEASED_CODES:
            raise ArtifactNotReleased(f"{what}: not released yet ({code}: {detail})")
        if status in (401, 403):
            raise OroAuthError(f"{what}: HTTP {status} ({detail}); check SHOPDISTILL_ORO_API_KEY")
        if status == 404:
            raise OroNotFound(f"{what}: not found ({code or 'HTTP 404'}: {detail})", code)
        raise OroApiError(f"{what}: HTTP {status} ({' '.join(detail.split())[:200]})")

    def _with_retries(self, what: str, send: Callable[[], Any]) -> Any:
        policy = self.policy
        for attempt in range(policy.max_retries + 1):
            last = attempt == policy.max_retries
            try:
                response = send()
            except httpx.TransportError as exc:  # timeouts, refused and reset connections
                self.stats.add(f"retry/{type(exc).__name__}")
                if last:
                    raise OroApiError(f"{what}: {type(exc).__name__} after {attempt + 1} tries") from None
                self._sleep(compute_delay(attempt, policy.base_delay_s, policy.max_delay_s, True))
                continue
            status = int(response.status_code)
            if status not in RETRY_STATUSES or last:
                if status in RETRY_STATUSES:
                    raise OroApiError(f"{what}: HTTP {status} after {attempt + 1} tries")
                return response
            self.stats.add(f"retry/{status}")
            retry_after = parse_retry_after(response)  # it reads only `.headers`
            self._sleep(compute_delay(attempt, policy.base_delay_s, policy.max_delay_s, True, retry_after))
        raise AssertionError("unreachable")

    def download(self, what: str, url: str) -> bytes:
        """GET a presigned URL: the body byte for byte, retried when cut short or refused."""
        return self._with_retries(what, lambda: self._download_once(what, url))

    def _download_once(self, what: str, url: str) -> Any:
        with self._downloads.stream("GET", url) as response:
            if response.status_code != 200:
                return _StatusOnly(response.status_code, response.headers, what)
            declared = response.headers.get("content-length")
            body = bytearray()
            try:
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ARTIFACT_BYTES:
                        raise OroApiError(f"{what}: artifact over {MAX_ARTIFACT_BYTES} bytes")
            except httpx.RemoteProtocolError:
                self.stats.add("download/truncated")
                raise httpx.ReadError("download cut short") from None
            if declared is not None and declared.isdigit() and int(declared) != len(body):
                self.stats.add("download/truncated")
                raise httpx.ReadError(f"download cut short: {len(body)} of {declared} bytes")
            return _Body(bytes(body))


@dataclass(frozen=True)
class _Body:
    content: bytes
    status_code: int = 200
    headers: Any = None


class _StatusOnly:
    """A non-200 answer to a presigned GET: retried like the API's, then a one-line error."""

    def __init__(self, status: int, headers: Any, what: str) -> None:
        self.status_code, self.headers, self.what = status, headers, what


def fetch_bytes(api: OroApi, what: str, url: str) -> bytes:
    answer = api.download(what, url)
    if isinstance(answer, _StatusOnly):
        if answer.status_code == 403:
            raise OroApiError(f"{what}: the presigned URL was refused (403: expired or bad signature)")
        if answer.status_code == 404:
            raise OroNotFound(f"{what}: the presigned URL names no object (404)", "ARTIFACT_NOT_FOUND")
        raise OroApiError(f"{what}: presigned download HTTP {answer.status_code}")
    return answer.content


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
