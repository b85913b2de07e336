"""Logger, Metrics and Tracer, built once. Every handler wears the same decorator stack via ``lambda_entry``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths

# The template sets POWERTOOLS_SERVICE_NAME / POWERTOOLS_METRICS_NAMESPACE; these defaults keep a process that
# imported us before its environment was set (tests, the local stack) emitting valid EMF rather than failing.
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "packyard")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Packyard")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

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
