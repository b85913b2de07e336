"""AWS clients, created lazily (no import-time AWS work) and cached per process.

The clients are botocore's low-level clients, which is all boto3's ``client()`` returns: made from a botocore
session directly, a cold start does not import boto3 (and s3transfer through it), about 40 ms of CPU on the first
call (issue 11). botocore is imported inside ``client`` so importing a handler stays cheap; the first call pays for
it once. ``AWS_ENDPOINT_URL`` (honoured by botocore) points every client at a local moto server.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

_creating = threading.Lock()


SERVICES = ("dynamodb", "s3", "stepfunctions", "kms", "events")
"""The services this code makes clients for."""


@cache
def _session() -> Any:
    """One botocore session for every client: its loader parses the endpoint and partition data once, not once per
    client (a second client, S3 beside DynamoDB, costs its own service model only)."""
    from botocore.session import get_session

    session = get_session()
    if not session.get_config_variable("data_path"):  # AWS_DATA_PATH adds models: then botocore looks for itself
        session.register_component("data_loader", _services_loader())
    return session


def _services_loader() -> Any:
    """botocore's loader, told which services there are instead of finding out.

    Before loading a model, botocore's ``Loader.list_available_services`` walks every service directory of its data
    (about 900 directory listings and 2,800 file checks, 15-20 ms of a cold start's first call, once per model type)
    only to check that the service asked for is among them. These are the services :data:`SERVICES` names; their
    models still load from botocore's own data files, the same ones, and any other service is refused as unknown."""
    from botocore.loaders import Loader

    class ServicesLoader(Loader):  # type: ignore[misc]
        def list_available_services(self, type_name: str) -> list[str]:
            return sorted(SERVICES)

    return ServicesLoader()


@cache
def client(service: str) -> Any:
    from botocore.config import Config

    extra: dict[str, Any] = {}
    if service == "s3":
        extra["s3"] = {"addressing_style": "path"}
        extra["signature_version"] = "s3v4"
    config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=60, **extra)
    with _creating:  # a botocore session is not thread-safe (the local stack runs handlers on threads)
        return _session().create_client(service, config=config)


def reset_clients() -> None:
    """Forget cached clients and their session (tests point the process at a fresh endpoint)."""
    client.cache_clear()
    _session.cache_clear()


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
