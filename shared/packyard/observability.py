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


def lambda_entry(correlation_id_path: str) -> Callable[[Handler], Handler]:
    """Logger (with correlation id), Tracer and Metrics around a Lambda handler, in that order."""

    def decorate(handler: Handler) -> Handler:
        wrapped = tracer.capture_lambda_handler(handler, capture_response=False)
        wrapped = logger.inject_lambda_context(correlation_id_path=correlation_id_path, log_event=False)(wrapped)
        return metrics.log_metrics(wrapped)

    return decorate
