"""boto3 clients, created lazily (no import-time AWS work) and cached per process.

boto3 is imported inside ``client`` so importing a handler stays cheap; the first call pays for it once.
``AWS_ENDPOINT_URL`` (honoured by boto3 itself) points every client at a local moto server.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def client(service: str) -> Any:
    import boto3
    from botocore.config import Config

    extra: dict[str, Any] = {}
    if service == "s3":
        extra["s3"] = {"addressing_style": "path"}
        extra["signature_version"] = "s3v4"
    config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=60, **extra)
    return boto3.session.Session().client(service, config=config)


def reset_clients() -> None:
    """Forget cached clients (tests point the process at a fresh endpoint)."""
    client.cache_clear()


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "SlowDown",
        "InternalError",
        "RequestTimeout",
    }
)


def is_transient(exc: BaseException) -> bool:
    return error_code(exc) in TRANSIENT_CODES


def translate(exc: Exception, service: str) -> Exception:
    """A botocore error as a domain error: throttles, timeouts and lost connections are transient (retry may fix
    them); any other refusal is a StoreFailure naming the service and the error code, never AWS's text. Anything
    that is not a botocore error (our own bugs, an injected crash) is returned unchanged."""
    from packyard.errors import PackyardError, StoreFailure, TransientStoreError

    if isinstance(exc, PackyardError):
        return exc
    code = error_code(exc)
    if code:
        if code in TRANSIENT_CODES:
            return TransientStoreError(f"{service}: {code}")
        return StoreFailure(f"{service} refused the request ({code})")
    from botocore.exceptions import BotoCoreError

    if isinstance(exc, BotoCoreError):
        return TransientStoreError(f"{service}: {type(exc).__name__}")
    return exc
