"""The limits API Gateway (HTTP API) applies before and around the function, as the local server enforces them.

Each number is AWS's documented one, read from template.yaml where the template sets it:

* request body: 10 MB ("Payload size", not adjustable; Quotas for configuring and running an HTTP API,
  https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html); API Gateway answers
  ``413 {"message":"Request Entity Too Large"}``;
* integration timeout: a route's ``TimeoutInMillis`` (SAM ``HttpApi`` event), else the HTTP API default of 30 s,
  which is also the maximum (same page; ``AWS::ApiGatewayV2::Integration`` TimeoutInMillis: "between 50 and 30,000
  milliseconds for HTTP APIs ... default ... 30 seconds"); API Gateway answers ``503 {"message":"Service
  Unavailable"}`` while the function may still run (its result is dropped);
* route throttle: the ``HttpApi`` resource's ``DefaultRouteSettings`` and ``RouteSettings`` (by route key) and an
  event's own ``RouteSettings``: ``ThrottlingBurstLimit`` (the bucket) and ``ThrottlingRateLimit`` (tokens a second),
  a token bucket per route ("Throttling requests to your HTTP API",
  https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html); above it API Gateway
  answers ``429 {"message":"Too Many Requests"}``.

``PACKYARD_LOCAL_EDGE_LIMITS=off`` (or ``LocalApiServer(..., edge=None)``) turns all three off, for a test or a
benchmark that needs more than an account would get.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.template import DEFAULT_TEMPLATE, UnsupportedTemplateError, load_template

MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_INTEGRATION_TIMEOUT_SECONDS = 30.0
SWITCH = "PACKYARD_LOCAL_EDGE_LIMITS"

TOO_LARGE = (413, b'{"message":"Request Entity Too Large"}')
TIMED_OUT = (503, b'{"message":"Service Unavailable"}')
THROTTLED = (429, b'{"message":"Too Many Requests"}')


@dataclass(frozen=True)
class Throttle:
    burst: int
    rate: float  # tokens a second


@dataclass(frozen=True)
class RouteLimits:
    timeout_seconds: float = DEFAULT_INTEGRATION_TIMEOUT_SECONDS
    throttle: Throttle | None = None


@dataclass
class EdgeLimits:
    """What API Gateway enforces per request, and the token buckets of the route throttles (shared by the server's
    threads: one bucket per route key, as API Gateway keeps one per route and stage)."""

    max_body_bytes: int = MAX_BODY_BYTES
    routes: Mapping[str, RouteLimits] = field(default_factory=dict)
    default: RouteLimits = field(default_factory=RouteLimits)
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, list[float]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def for_route(self, route_key: str) -> RouteLimits:
        return self.routes.get(route_key, self.default)

    def admit(self, route_key: str) -> bool:
        """Take a token from the route's bucket: False when it is empty (the request is throttled)."""
        throttle = self.for_route(route_key).throttle
        if throttle is None:
            return True
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.get(route_key, [float(throttle.burst), now])
            tokens = min(float(throttle.burst), tokens + (now - last) * throttle.rate)
            admitted = tokens >= 1.0
            self._buckets[route_key] = [tokens - 1.0 if admitted else tokens, now]
            return admitted


def switched_off(environ: Mapping[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get(SWITCH, "").strip().lower() in ("off", "0", "false")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnsupportedTemplateError(f"{where}: a literal number is needed locally, got {value!r}")
    return float(value)


def _throttle(settings: Mapping[str, Any] | None, where: str, inherited: Throttle | None) -> Throttle | None:
    if not settings or ("ThrottlingBurstLimit" not in settings and "ThrottlingRateLimit" not in settings):
        return inherited
    burst = settings.get("ThrottlingBurstLimit", inherited.burst if inherited else None)
    rate = settings.get("ThrottlingRateLimit", inherited.rate if inherited else None)
    if burst is None or rate is None:
        raise UnsupportedTemplateError(f"{where}: a route throttle needs both ThrottlingBurstLimit and RateLimit")
    return Throttle(burst=int(_number(burst, where)), rate=_number(rate, where))


def from_template(template: str | Path | Mapping[str, Any] = DEFAULT_TEMPLATE) -> EdgeLimits:
    """The limits template.yaml sets for its HTTP API's routes (one HttpApi resource, as Packyard has)."""
    loaded = template if isinstance(template, Mapping) else load_template(template)
    resources: Mapping[str, Any] = loaded.get("Resources", {})
    apis = [r for r in resources.values() if r.get("Type") == "AWS::Serverless::HttpApi"]
    api_props: Mapping[str, Any] = apis[0].get("Properties", {}) if apis else {}
    default_throttle = _throttle(api_props.get("DefaultRouteSettings"), "DefaultRouteSettings", None)
    stage_routes: Mapping[str, Any] = api_props.get("RouteSettings") or {}
    routes: dict[str, RouteLimits] = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event_name, event in (resource.get("Properties", {}).get("Events") or {}).items():
            if event.get("Type") != "HttpApi":
                continue
            props = event.get("Properties", {})
            key = f"{str(props['Method']).upper()} {props['Path']}"
            where = f"{logical_id}.Events.{event_name}"
            throttle = _throttle(stage_routes.get(key), f"RouteSettings[{key}]", default_throttle)
            throttle = _throttle(props.get("RouteSettings"), f"{where}.RouteSettings", throttle)
            timeout = DEFAULT_INTEGRATION_TIMEOUT_SECONDS
            if "TimeoutInMillis" in props:
                timeout = _number(props["TimeoutInMillis"], f"{where}.TimeoutInMillis") / 1000
            routes[key] = RouteLimits(timeout_seconds=timeout, throttle=throttle)
    return EdgeLimits(routes=routes, default=RouteLimits(throttle=default_throttle))


def configured(template: str | Path = DEFAULT_TEMPLATE) -> EdgeLimits | None:
    """The template's limits, or None when ``PACKYARD_LOCAL_EDGE_LIMITS=off``."""
    return None if switched_off() else from_template(template)
