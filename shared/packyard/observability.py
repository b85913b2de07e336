"""Logger, Metrics and Tracer, built once. Every handler wears the same decorator stack via ``lambda_entry``.

Cold start (issue 11): the Tracer is Powertools' own, active on AWS exactly as before, with two exceptions to
what it costs at import:

* it instruments ``botocore`` only (``patch_modules``), not every library X-Ray knows (``patch_all`` also imports and
  patches ``httplib``, ``sqlite3``, ``requests``, ``httpx``, ...): every AWS call is still a subsegment, and no
  code here makes HTTP calls any other way. About 35 ms less per cold start;
* where tracing is off (``POWERTOOLS_TRACE_DISABLED``, or outside Lambda: tests, the local stack, SAM local, by
  Powertools' own rule), it runs on a provider that does nothing, so the X-Ray SDK is never imported: outside Lambda
  its recorder builds a botocore X-Ray client at import (~0.3-0.5 s per process).

Nothing here reads a clock, a random source or credentials at import, so a SnapStart snapshot taken after init holds
nothing unique.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment

# The template sets POWERTOOLS_SERVICE_NAME / POWERTOOLS_METRICS_NAMESPACE; these defaults keep a process that
# imported us before its environment was set (tests, the local stack) emitting valid EMF rather than failing.
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "packyard")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Packyard")
TRACED_MODULES = ("botocore",)
"""What X-Ray instruments: every DynamoDB, S3 and Step Functions call goes through botocore."""


class _NoSegment(BaseSegment):
    """The segment of a tracer that is off: every call is accepted and dropped."""

    def close(self, end_time: int | None = None) -> None:
        return None

    def add_subsegment(self, subsegment: Any) -> None:
        return None

    def remove_subsegment(self, subsegment: Any) -> None:
        return None

    def put_annotation(self, key: str, value: Any) -> None:
        return None

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        return None

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        return None


class NoTracing(BaseProvider):
    """A tracing provider that records nothing and imports nothing: what Powertools' Tracer runs on when it is off."""

    @contextlib.contextmanager
    def in_subsegment(self, name: Any = None, **kwargs: Any) -> Generator[BaseSegment, None, None]:
        yield _NoSegment()

    @contextlib.asynccontextmanager
    async def in_subsegment_async(self, name: Any = None, **kwargs: Any) -> AsyncGenerator[BaseSegment, None]:
        yield _NoSegment()

    def put_annotation(self, key: str, value: Any) -> None:
        return None

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        return None

    def patch(self, modules: Sequence[str]) -> None:
        return None

    def patch_all(self) -> None:
        return None


def tracing_enabled() -> bool:
    """Powertools' own rule: on unless ``POWERTOOLS_TRACE_DISABLED`` is true, or this is not Lambda (no
    ``LAMBDA_TASK_ROOT``), or it is SAM local / Chalice local."""
    return not Tracer._is_tracer_disabled()


def build_tracer() -> Tracer:
    if tracing_enabled():
        return Tracer(service=SERVICE, patch_modules=TRACED_MODULES)
    return Tracer(service=SERVICE, disabled=True, auto_patch=False, provider=NoTracing())


logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = build_tracer()

HTTP_CORRELATION = correlation_paths.API_GATEWAY_HTTP
# Step Functions tasks carry the id of the thing they work on; it doubles as the execution name.
UPLOAD_CORRELATION = "uploadId"
OPERATION_CORRELATION = "operationId"

Handler = Callable[[dict[str, Any], Any], Any]


def lambda_entry(correlation_id_path: str, *, settings: tuple[str, ...] = ()) -> Callable[[Handler], Handler]:
    """Logger (with correlation id), Tracer and Metrics around a Lambda handler, in that order. ``settings`` names
    the Settings fields the handler needs: a missing one fails the invocation with the variable's name, before the
    handler runs. Log keys appended during one invocation are cleared before the next."""

    def decorate(handler: Handler) -> Handler:
        def checked(event: dict[str, Any], context: Any) -> Any:
            if settings:
                from packyard.config import required

                required(*settings)
            return handler(event, context)

        wrapped = tracer.capture_lambda_handler(checked, capture_response=False)
        wrapped = logger.inject_lambda_context(
            correlation_id_path=correlation_id_path, log_event=False, clear_state=True
        )(wrapped)
        return metrics.log_metrics(wrapped)

    return decorate
