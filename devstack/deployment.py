"""What a deploy of template.yaml asks of the account, read from the template itself (as given to ``sam deploy``, or
as the SAM translator expands it): the Lambda concurrency it reserves, whether an account's concurrency limit fits
it, and the HTTP API's route throttles.

AWS keeps 100 of an account's Lambda concurrency unreserved: "You can reserve up to the Unreserved account
concurrency value that is shown, minus 100 for functions that don't have reserved concurrency"
(https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html). A function whose
``ReservedConcurrentExecutions`` would leave less fails its CloudFormation create ("Specified
ReservedConcurrentExecutions for function decreases account's UnreservedConcurrentExecution below its minimum value
of [100]"), so a stack that reserves R deploys only on an account whose limit is at least R + 100, and a stack that
reserves nothing deploys on any account (new accounts may start with a limit of 10).

``tests/integration/test_account_fit.py`` checks the defaults on the translated template; ``benchmarks/
simulate_capacity.py`` reads the reserved figures and the route throttles to name the bottleneck.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devstack.template import _parameters, _reserved, _Resolver

UNRESERVED_MINIMUM = 100  # Lambda concurrency AWS keeps unreserved in every account (see the module docstring)
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")

# parameters without a default, given placeholder values so the rest of the template resolves
PLACEHOLDERS = {"JwtIssuer": "https://issuer.example", "JwtAudience": "audience"}


def _resolver(template: Mapping[str, Any], parameters: Mapping[str, str] | None) -> _Resolver:
    given = {k: v for k, v in PLACEHOLDERS.items() if k in template.get("Parameters", {})}
    given.update(parameters or {})
    return _Resolver(
        template, stack_name="fit", region="us-east-1", account="123456789012", parameters=_parameters(template, given)
    )


def reserved_concurrency(template: Mapping[str, Any], parameters: Mapping[str, str] | None = None) -> dict[str, int]:
    """Function logical id → the concurrency it reserves (reserved plus provisioned), for the functions that reserve
    any, with ``parameters`` over the template's defaults."""
    resolver = _resolver(template, parameters)
    found: dict[str, int] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        if resource.get("Type") in FUNCTION_TYPES:
            value = _reserved(resolver, logical_id, props)
            provisioned = resolver.resolve({"v": props.get("ProvisionedConcurrencyConfig")}, logical_id).get("v")
        elif resource.get("Type") == "AWS::Lambda::Alias":
            value, provisioned = None, resolver.resolve({"v": props.get("ProvisionedConcurrencyConfig")}, logical_id)
            provisioned = provisioned.get("v")
        else:
            continue
        total = value or 0
        if provisioned:
            total += int(provisioned["ProvisionedConcurrentExecutions"])
        if total:
            found[logical_id] = total
    return found


def minimum_account_limit(reserved_total: int) -> int:
    """The smallest account concurrency limit a stack reserving ``reserved_total`` deploys on (0: any account)."""
    return reserved_total + UNRESERVED_MINIMUM if reserved_total else 0


def fits(account_limit: int, reserved_total: int) -> bool:
    return account_limit >= minimum_account_limit(reserved_total)


@dataclass(frozen=True)
class RouteThrottle:
    route: str  # "GET /v1/workspaces/{workspace}/resolved"
    function: str  # the logical id of the function behind it
    rate: float  # steady requests per second
    burst: int


def route_throttles(template: Mapping[str, Any], parameters: Mapping[str, str] | None = None) -> list[RouteThrottle]:
    """Every HTTP API route of the (SAM) template with the throttle API Gateway applies to it: its
    ``RouteSettings`` entry, else the API's ``DefaultRouteSettings``. A route without either has none (it is then
    bounded only by the account's throttle)."""
    resolver = _resolver(template, parameters)
    resources = template.get("Resources", {})
    apis = {
        k: resolver.resolve(
            {key: v.get("Properties", {}).get(key, {}) for key in ("DefaultRouteSettings", "RouteSettings")}, k
        )
        for k, v in resources.items()
        if v.get("Type") == "AWS::Serverless::HttpApi"
    }
    found: list[RouteThrottle] = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") != "HttpApi":
                continue
            props = event["Properties"]
            api_id = props.get("ApiId", {}).get("Ref") if isinstance(props.get("ApiId"), dict) else None
            api = apis.get(str(api_id), {})
            route = f"{props['Method'].upper()} {props['Path']}"
            settings = {**api.get("DefaultRouteSettings", {}), **api.get("RouteSettings", {}).get(route, {})}
            if "ThrottlingRateLimit" in settings:
                rate = float(settings["ThrottlingRateLimit"])
                found.append(RouteThrottle(route, logical_id, rate, int(settings.get("ThrottlingBurstLimit", 0))))
    return found
