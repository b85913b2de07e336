"""IAM by observation: the calls the code makes, as IAM actions on resources, checked against the template's roles.

moto does not enforce IAM, so a missing permission would only show after ``sam deploy``. This module makes the
roles a tested property (``tests/integration/test_iam.py``):

* :func:`needs_of` maps one recorded call (:func:`devstack.counting.record_aws_calls`) to the IAM actions and
  resources AWS authorizes it against: ``TransactWriteItems`` → the Put/Update/Delete/ConditionCheck items it holds,
  each on its table; ``Query``/``Scan`` with ``IndexName`` → the index ARN; ``BatchGetItem``/``BatchWriteItem`` →
  per table; ``HeadObject`` → ``s3:GetObject``; ``CopyObject`` → ``s3:GetObject`` on the source and
  ``s3:PutObject`` on the target; ``DeleteObjects`` → ``s3:DeleteObject`` per key; a presigned URL → the action it
  signs; a read answered 404 → also ``s3:ListBucket`` on the bucket (without it S3 answers 403, not "absent");
  Step Functions' task-token callbacks → Resource ``*`` (they have no resource-level permissions).
* :func:`machine_needs` derives what a state machine's role needs from its ASL definition (every Lambda function a
  Task invokes, ``lambda:invoke.waitForTaskToken`` included) and its ``Logging`` (vended-log delivery).
* :func:`expand_template` expands template.yaml with the SAM translator (as ``sam deploy`` does); :func:`roles`
  resolves each function's and state machine's role against the local stack's physical names and ARNs.
* :meth:`Role.allows` evaluates the role's inline statements (Allow/Deny, ``*``/``?`` wildcards in actions and
  resources); :func:`unused_grants` lists the (action, resource) pairs a role grants that no need uses;
  :func:`reason_comments` reads the comment a statement carries in template.yaml (why a grant is kept unused).

Managed policies (``AWSLambdaBasicExecutionRole``, ``AWSXrayWriteOnlyAccess``) cover the runtime's logs and
traces, not calls the code makes; :attr:`Role.managed` lists them for the test to pin.

Why one module of ~530 lines: the call-to-action mapping, the role resolution and the policy evaluation are one
check, read together when a grant is questioned; split, each would need the others' resource naming.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from devstack import counting, lambdas
from devstack.counting import AwsCall
from devstack.template import DEFAULT_TEMPLATE, ROOT, Stack, _Resolver, load_template, render_definition

SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
SAM_TRANSFORM_SCRIPT = Path(__file__).resolve().parent / "sam_transform.py"

# What Step Functions needs to deliver execution logs to CloudWatch Logs (vended logs): AWS documents these
# actions, on Resource "*" (they have no resource-level permissions), for any state machine with Logging.
LOG_DELIVERY_ACTIONS = (
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
)
_TASK_TOKEN_CALLBACKS = ("SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat")


class UnmappedCall(ValueError):
    """A call this module cannot map to IAM actions yet: extend :func:`needs_of` (and the roles) for it."""


class UnsupportedPolicy(ValueError):
    """A policy or definition construct the evaluator does not model (conditions, NotAction, dynamic targets…)."""


@dataclass(frozen=True, order=True)
class Need:
    """One IAM action on one resource ARN that a call is authorized against."""

    action: str
    resource: str


# ------------------------------------------------------------------ who made a call


@contextmanager
def attributing_invocations() -> Iterator[None]:
    """While active, every in-process handler call (HTTP routes and Step Functions tasks alike) runs inside
    :func:`devstack.counting.invoking` with its function's logical id, so recorded calls name their function.

    It wraps ``devstack.lambdas._container``, which both dispatch paths enter around the handler call. Once
    devstack.lambdas marks invocations itself this wrapper only nests the same mark."""
    original: Callable[[Any], AbstractContextManager[Callable[[Any, Any], Any]]] = lambdas._container

    @contextmanager
    def container(spec: Any) -> Iterator[Callable[[Any, Any], Any]]:
        with original(spec) as handler, counting.invoking(spec.logical_id):
            yield handler

    lambdas._container = container
    try:
        yield
    finally:
        lambdas._container = original  # type: ignore[assignment]


# ------------------------------------------------------------------ calls → IAM actions


def needs_of(call: AwsCall, region: str, account: str) -> list[Need]:
    """The IAM actions and resources AWS checks for one call (a presigned URL: for the request it signs)."""
    params = call.params
    if call.service == "dynamodb":
        return _dynamodb_needs(call.operation, params, region, account)
    if call.service == "s3":
        needs = _s3_needs(call.operation, params)
        if call.operation in ("GetObject", "HeadObject") and call.outcome.get("status") == 404:
            # S3 answers "no such key" (404) only to a caller allowed s3:ListBucket on the bucket, anyone else gets
            # 403 AccessDenied: code that reads a 404 as "absent" needs it
            needs.append(Need("s3:ListBucket", f"arn:aws:s3:::{params['Bucket']}"))
        return needs
    if call.service == "stepfunctions":
        if call.operation in _TASK_TOKEN_CALLBACKS:
            return [Need(f"states:{call.operation}", "*")]
        if call.operation == "StartExecution":
            return [Need("states:StartExecution", str(params["stateMachineArn"]))]
        if call.operation in ("DescribeExecution", "StopExecution", "GetExecutionHistory"):
            return [Need(f"states:{call.operation}", str(params["executionArn"]))]
    if call.service == "kms" and call.operation in ("Sign", "GetPublicKey"):
        # authorized against the key, whatever names it: an alias is resolved to its key (the answer's KeyId)
        answered = str(call.outcome.get("keyArn", ""))
        if answered and not answered.startswith(("arn:", "alias/")):
            # moto's GetPublicKey answers the key id where AWS answers the key ARN: the same key
            answered = f"arn:aws:kms:{region}:{account}:key/{answered}"
        return [Need(f"kms:{call.operation}", answered if answered.startswith("arn:") else str(params["KeyId"]))]
    if call.service == "events" and call.operation == "PutEvents":
        # authorized against each entry's bus (a name is the account's bus of that name in the region)
        buses = sorted({str(e.get("EventBusName", "default")) for e in params.get("Entries", [])})
        return [Need("events:PutEvents", _event_bus_arn(bus, region, account)) for bus in buses]
    if call.service == "lambda" and call.operation == "Invoke":
        return [Need("lambda:InvokeFunction", _function_arn(str(params["FunctionName"]), region, account))]
    raise UnmappedCall(f"{call.service} {call.operation}: no IAM mapping; add one to devstack.iam.needs_of")


def _event_bus_arn(bus: str, region: str, account: str) -> str:
    return bus if bus.startswith("arn:") else f"arn:aws:events:{region}:{account}:event-bus/{bus}"


def table_arn(name: str, region: str, account: str) -> str:
    return f"arn:aws:dynamodb:{region}:{account}:table/{name}"


_DYNAMODB_ITEM_OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "DescribeTable")
_TRANSACT_WRITE_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}


def _dynamodb_needs(operation: str, params: Mapping[str, Any], region: str, account: str) -> list[Need]:
    if operation in _DYNAMODB_ITEM_OPERATIONS:
        return [Need(f"dynamodb:{operation}", table_arn(params["TableName"], region, account))]
    if operation in ("Query", "Scan"):
        resource = table_arn(params["TableName"], region, account)
        if params.get("IndexName"):
            resource += f"/index/{params['IndexName']}"
        return [Need(f"dynamodb:{operation}", resource)]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [Need(f"dynamodb:{operation}", table_arn(t, region, account)) for t in params["RequestItems"]]
    if operation == "TransactWriteItems":
        found: list[Need] = []
        for item in params["TransactItems"]:
            ((kind, body),) = item.items()
            found.append(Need(_TRANSACT_WRITE_ACTIONS[kind], table_arn(body["TableName"], region, account)))
        return found
    if operation == "TransactGetItems":
        return [
            Need("dynamodb:GetItem", table_arn(i["Get"]["TableName"], region, account)) for i in params["TransactItems"]
        ]
    raise UnmappedCall(f"dynamodb {operation}: no IAM mapping; add one to devstack.iam.needs_of")


def object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def _copy_source(value: Any) -> tuple[str, str]:
    if isinstance(value, Mapping):
        return str(value["Bucket"]), str(value["Key"])
    # botocore's handler has already turned the dict into "bucket/key" (URL-quoted, maybe ?versionId=…)
    text = unquote(str(value).split("?versionId=", 1)[0]).lstrip("/")
    bucket, _, key = text.partition("/")
    return bucket, key


def _s3_needs(operation: str, params: Mapping[str, Any]) -> list[Need]:
    bucket = str(params.get("Bucket", ""))
    if operation in ("GetObject", "HeadObject"):
        # HeadObject is authorized as s3:GetObject; a versioned read would be s3:GetObjectVersion
        action = "s3:GetObjectVersion" if params.get("VersionId") else "s3:GetObject"
        return [Need(action, object_arn(bucket, params["Key"]))]
    if operation == "PutObject":
        return [Need("s3:PutObject", object_arn(bucket, params["Key"]))]
    if operation == "CopyObject":
        source_bucket, source_key = _copy_source(params["CopySource"])
        return [
            Need("s3:GetObject", object_arn(source_bucket, source_key)),
            Need("s3:PutObject", object_arn(bucket, params["Key"])),
        ]
    if operation == "DeleteObject":
        return [Need("s3:DeleteObject", object_arn(bucket, params["Key"]))]
    if operation == "DeleteObjects":
        return [Need("s3:DeleteObject", object_arn(bucket, o["Key"])) for o in params["Delete"]["Objects"]]
    if operation in ("ListObjectsV2", "ListObjects"):
        return [Need("s3:ListBucket", f"arn:aws:s3:::{bucket}")]
    raise UnmappedCall(f"s3 {operation}: no IAM mapping; add one to devstack.iam.needs_of")


def _function_arn(name: str, region: str, account: str) -> str:
    if name.startswith("arn:"):
        return name.split(":$LATEST")[0]
    return f"arn:aws:lambda:{region}:{account}:function:{name}"


# ------------------------------------------------------------------ template expansion (the SAM translator)


def sam_input(template: str | Path = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """The template as the translator takes it: local code paths as placeholder S3 URIs (as ``sam validate``
    does), and each ``DefinitionUri`` file inlined as ``Definition``."""
    path = Path(template).resolve()
    document = load_template(path)
    for resource in document.get("Resources", {}).values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://local-sam-transform/{props[key].strip('/')}"
        if isinstance(props.get("DefinitionUri"), str):
            props["Definition"] = json.loads((path.parent / props.pop("DefinitionUri")).read_text("utf-8"))
    return document


def expand_template(template: str | Path = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """template.yaml after the ``AWS::Serverless-2016-10-31`` transform: every function and state machine with its
    generated ``AWS::IAM::Role``. Uses ``samtranslator`` in-process if it imports, else ``.venv-sam``'s."""
    path = Path(template).resolve()
    return json.loads(_expanded(str(path), path.stat().st_mtime_ns))  # type: ignore[no-any-return]


@functools.cache
def _expanded(path: str, _mtime: int) -> str:
    document = sam_input(path)
    try:
        import samtranslator  # noqa: F401
    except ImportError:
        pass
    else:
        from devstack import sam_transform

        return json.dumps(sam_transform.transform(document))
    if not SAM_PYTHON.exists():
        raise RuntimeError(
            "expanding template.yaml needs aws-sam-translator: it lives in .venv-sam (make validate builds it from "
            "requirements-sam.lock)"
        )
    completed = subprocess.run(
        [str(SAM_PYTHON), str(SAM_TRANSFORM_SCRIPT)],
        input=json.dumps({"template": document}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"},
    )
    if completed.returncode != 0:
        raise RuntimeError(f"the SAM translator refused template.yaml:\n{completed.stderr[-4000:]}")
    return completed.stdout


# ------------------------------------------------------------------ roles and their evaluation


def _glob(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{regex}$", re.IGNORECASE if ignore_case else 0)


@dataclass(frozen=True)
class Statement:
    """One statement of a role's inline policies, its intrinsics resolved."""

    owner: str  # the function or state machine whose role holds it (logical id)
    policy: str  # the inline policy's name (SAM: <Role>Policy<n>)
    sid: str | None
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.sid or self.policy

    def matches(self, need: Need) -> bool:
        return any(_glob(a, ignore_case=True).match(need.action) for a in self.actions) and any(
            _glob(r).match(need.resource) for r in self.resources
        )


@dataclass(frozen=True)
class Role:
    owner: str  # logical id of the function or state machine
    kind: str  # "function" | "state machine"
    role: str  # logical id of the generated AWS::IAM::Role
    statements: tuple[Statement, ...]
    managed: tuple[str, ...]  # managed policy ARNs attached

    def allows(self, need: Need) -> bool:
        """Explicit deny wins; otherwise any Allow statement matching the action and the resource."""
        if any(s.effect == "Deny" and s.matches(need) for s in self.statements):
            return False
        return any(s.effect == "Allow" and s.matches(need) for s in self.statements)


def local_resolver(stack: Stack, template: str | Path = DEFAULT_TEMPLATE) -> _Resolver:
    """The devstack resolver with the local stack's physical names and ARNs (as create_stack resolved them)."""
    resolver = _Resolver(
        load_template(template),
        stack_name=stack.name,
        region=stack.region,
        account=stack.account,
        parameters=stack.parameters,
    )
    for logical_id, name in stack.tables.items():
        resolver.refs[logical_id] = name
        resolver.attributes[(logical_id, "Arn")] = table_arn(name, stack.region, stack.account)
    for logical_id, name in stack.buckets.items():
        resolver.refs[logical_id] = name
        resolver.attributes[(logical_id, "Arn")] = f"arn:aws:s3:::{name}"
    for logical_id, arn in stack.state_machine_arns.items():
        resolver.refs[logical_id] = arn
        resolver.attributes[(logical_id, "Arn")] = arn
        resolver.attributes[(logical_id, "Name")] = arn.rsplit(":", 1)[1]
    for logical_id, spec in stack.functions.items():
        resolver.refs[logical_id] = spec.name
        resolver.attributes[(logical_id, "Arn")] = spec.arn
    for logical_id, arn in stack.keys.items():
        resolver.refs[logical_id] = arn.rsplit("/", 1)[1]
        resolver.attributes[(logical_id, "Arn")] = arn
    for logical_id, name in stack.event_buses.items():
        resolver.refs[logical_id] = name
        resolver.attributes[(logical_id, "Name")] = name
        resolver.attributes[(logical_id, "Arn")] = f"arn:aws:events:{stack.region}:{stack.account}:event-bus/{name}"
    for logical_id, name in stack.aliases.items():
        resolver.refs[logical_id] = name
        resolver.attributes[(logical_id, "Arn")] = f"arn:aws:kms:{stack.region}:{stack.account}:{name}"
    return resolver


def _as_tuple(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _role_id(value: Any, owner: str) -> str:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return str(target[0] if isinstance(target, list) else str(target).split(".")[0])
    raise UnsupportedPolicy(f"{owner}: its role is not a role of this template ({value!r})")


def roles(expanded: Mapping[str, Any], stack: Stack, template: str | Path = DEFAULT_TEMPLATE) -> dict[str, Role]:
    """Every function's and state machine's role in the expanded template, resolved against ``stack``."""
    resolver = local_resolver(stack, template)
    resources: Mapping[str, Any] = expanded["Resources"]
    found: dict[str, Role] = {}
    for owner, resource in resources.items():
        kind = {"AWS::Lambda::Function": "function", "AWS::StepFunctions::StateMachine": "state machine"}.get(
            resource["Type"]
        )
        if kind is None:
            continue
        props = resource["Properties"]
        role_id = _role_id(props.get("Role") or props.get("RoleArn"), owner)
        role_props = resources[role_id]["Properties"]
        statements: list[Statement] = []
        for policy in role_props.get("Policies", []):
            document = resolver.resolve(policy["PolicyDocument"], f"{role_id}.{policy['PolicyName']}")
            raw = document["Statement"]
            for statement in raw if isinstance(raw, list) else [raw]:
                unsupported = {"Condition", "NotAction", "NotResource", "Principal"} & set(statement)
                if unsupported:
                    raise UnsupportedPolicy(f"{owner}: {sorted(unsupported)} in {policy['PolicyName']} not modelled")
                statements.append(
                    Statement(
                        owner=owner,
                        policy=str(policy["PolicyName"]),
                        sid=statement.get("Sid"),
                        effect=str(statement["Effect"]),
                        actions=_as_tuple(statement["Action"]),
                        resources=_as_tuple(statement["Resource"]),
                    )
                )
        managed = resolver.resolve(role_props.get("ManagedPolicyArns", []), f"{role_id}.ManagedPolicyArns")
        found[owner] = Role(owner, kind, role_id, tuple(statements), tuple(str(m) for m in managed))
    return found


@dataclass(frozen=True, order=True)
class Grant:
    """One (action, resource pattern) pair of one Allow statement."""

    owner: str
    statement: str  # Sid, else the inline policy's name
    action: str
    resource: str


def grants(role: Role) -> list[Grant]:
    return [
        Grant(role.owner, s.label, action, resource)
        for s in role.statements
        if s.effect == "Allow"
        for action in s.actions
        for resource in s.resources
    ]


def unused_grants(role: Role, needs: Iterable[Need]) -> list[Grant]:
    """The pairs the role grants that no need falls under (each pair on its own, so a statement listing a resource
    or an action nothing uses shows it)."""
    wanted = list(set(needs))
    unused: list[Grant] = []
    for grant in grants(role):
        action, resource = _glob(grant.action, ignore_case=True), _glob(grant.resource)
        if not any(action.match(n.action) and resource.match(n.resource) for n in wanted):
            unused.append(grant)
    return sorted(unused)


# ------------------------------------------------------------------ grants wider than the calls need


@dataclass(frozen=True, order=True)
class WideGrant:
    """A grant whose resource pattern reaches kinds of resource (:func:`resource_kind`) that no need of its action
    is: ``beyond`` lists them, symbolic."""

    grant: Grant
    beyond: tuple[str, ...]


OTHER = "packyard-probe-other"  # a name no resource of the stack has


def probes(stack: Stack, template: str | Path = DEFAULT_TEMPLATE) -> list[str]:
    """One resource ARN of every kind a grant could reach: the stack's bucket and an object under each key prefix
    the code uses (``uploads/``, ``blobs/``) and under another; its table, each index and another index, a stream;
    each state machine and an execution of it; each function; and the same kinds of resource that are not the
    stack's (another bucket, table, state machine, function). A grant that reaches a probe of a kind its calls
    never touch is wider than they need."""
    region, account = stack.region, stack.account
    found: list[str] = []
    for bucket in stack.buckets.values():
        found.append(f"arn:aws:s3:::{bucket}")
        found += [object_arn(bucket, f"{prefix}/{OTHER}") for prefix in ("uploads", "blobs", OTHER)]
    found += [f"arn:aws:s3:::{OTHER}", object_arn(OTHER, OTHER)]
    resources = load_template(template).get("Resources", {})
    for logical_id, name in stack.tables.items():
        arn = table_arn(name, region, account)
        indexes = resources.get(logical_id, {}).get("Properties", {}).get("GlobalSecondaryIndexes", [])
        found += [arn, f"{arn}/index/{OTHER}", f"{arn}/stream/{OTHER}"]
        found += [f"{arn}/index/{index['IndexName']}" for index in indexes]
    found.append(table_arn(OTHER, region, account))
    machines = [arn.rsplit(":", 1)[1] for arn in stack.state_machine_arns.values()]
    for machine in [*machines, OTHER]:
        found.append(f"arn:aws:states:{region}:{account}:stateMachine:{machine}")
        found.append(f"arn:aws:states:{region}:{account}:execution:{machine}:{OTHER}")
    found += [spec.arn for spec in stack.functions.values()]
    found.append(_function_arn(OTHER, region, account))
    return found


def wider_grants(role: Role, needs: Iterable[Need], stack: Stack, reach: Iterable[str]) -> list[WideGrant]:
    """The grants of ``role`` whose resource pattern reaches (among the ``reach`` probes) a kind of resource no
    need of their action is. An action needed on ``*`` (no resource-level permissions) cannot be granted narrower;
    a grant no need uses at all is :func:`unused_grants`' to report."""
    wanted = list(set(needs))
    targets = list(reach)
    found: list[WideGrant] = []
    for grant in grants(role):
        action = _glob(grant.action, ignore_case=True)
        needed = [n for n in wanted if action.match(n.action)]
        if not needed or any(n.resource == "*" for n in needed):
            continue
        kinds = {resource_kind(n.resource, stack) for n in needed}
        pattern = _glob(grant.resource)
        beyond = sorted({resource_kind(t, stack) for t in targets if pattern.match(t)} - kinds)
        if beyond:
            found.append(WideGrant(grant, tuple(beyond)))
    return sorted(found)


def stated_wider(template: str | Path = DEFAULT_TEMPLATE) -> dict[tuple[str, str, str], str]:
    """``(resource logical id, Sid, action)`` → why the template grants it wider than the calls observed need, from
    the resource's ``Metadata: {packyard: {iam-wider: [{Sid, Action, Why}]}}`` entries."""
    found: dict[tuple[str, str, str], str] = {}
    for logical_id, resource in load_template(template).get("Resources", {}).items():
        for entry in resource.get("Metadata", {}).get("packyard", {}).get("iam-wider", []):
            found[(logical_id, str(entry["Sid"]), str(entry["Action"]))] = str(entry["Why"])
    return found


# ------------------------------------------------------------------ state machines: from their definitions


def _tasks(states: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield name, state
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                mode = state[key].get("ProcessorConfig", {}).get("Mode", "INLINE")
                if mode != "INLINE":
                    raise UnsupportedPolicy(f"Map state {name}: {mode} mode needs states:StartExecution, not modelled")
                yield from _tasks(state[key]["States"])
        for branch in state.get("Branches", []):
            yield from _tasks(branch["States"])


_LAMBDA_INTEGRATIONS = ("arn:aws:states:::lambda:invoke", "arn:aws:states:::lambda:invoke.waitForTaskToken")


def definition_needs(definition: Mapping[str, Any], region: str, account: str, where: str = "") -> list[Need]:
    """``lambda:InvokeFunction`` on every function a Task state invokes: a Lambda ARN as the Resource, or the
    ``lambda:invoke`` integration (``.waitForTaskToken`` too) with a static ``FunctionName``."""
    found: list[Need] = []
    for name, task in _tasks(definition["States"]):
        resource = str(task["Resource"])
        if resource.startswith("arn:aws:lambda:"):
            target = resource
        elif resource in _LAMBDA_INTEGRATIONS:
            arguments = task.get("Parameters") or task.get("Arguments") or {}
            if "FunctionName" not in arguments:
                raise UnsupportedPolicy(f"{where}{name}: a lambda:invoke task without a static FunctionName")
            target = str(arguments["FunctionName"])
        else:
            raise UnsupportedPolicy(f"{where}{name}: Task resource {resource} is not modelled; extend devstack.iam")
        found.append(Need("lambda:InvokeFunction", _function_arn(target, region, account)))
    return sorted(set(found))


def machine_needs(stack: Stack, template: str | Path = DEFAULT_TEMPLATE) -> dict[str, list[Need]]:
    """What each state machine's role needs, from its definition (with the stack's substitutions) and Logging."""
    path = Path(template).resolve()
    document = load_template(path)
    resolver = local_resolver(stack, path)
    found: dict[str, list[Need]] = {}
    for logical_id, resource in document.get("Resources", {}).items():
        if resource["Type"] != "AWS::Serverless::StateMachine":
            continue
        props = resource.get("Properties", {})
        if "DefinitionUri" not in props:
            raise UnsupportedPolicy(f"{logical_id}: only a DefinitionUri file is modelled")
        substitutions = resolver.resolve(props.get("DefinitionSubstitutions", {}), logical_id)
        text = render_definition((path.parent / props["DefinitionUri"]).read_text("utf-8"), substitutions)
        needs = definition_needs(json.loads(text), stack.region, stack.account, f"{logical_id}.")
        if props.get("Logging", {}).get("Destinations"):
            needs += [Need(action, "*") for action in LOG_DELIVERY_ACTIONS]
        found[logical_id] = needs
    return found


# ------------------------------------------------------------------ reasons written next to statements


_RESOURCE_LINE = re.compile(r"^  ([A-Za-z0-9]+):\s*$")
_SID_LINE = re.compile(r"^\s*-\s+Sid:\s*(\S+)\s*$")
_STATEMENT_LINE = re.compile(r"^\s*-\s+Statement:\s*$")


def reason_comments(template: str | Path = DEFAULT_TEMPLATE) -> dict[tuple[str, str], str]:
    """``(resource logical id, Sid)`` → the comment lines written directly above the statement's ``- Sid:`` line
    (or above its ``- Statement:`` line) in template.yaml."""
    lines = Path(template).read_text("utf-8").splitlines()
    found: dict[tuple[str, str], str] = {}
    resource = ""
    for index, line in enumerate(lines):
        declared = _RESOURCE_LINE.match(line)
        if declared:
            resource = declared.group(1)
            continue
        sid = _SID_LINE.match(line)
        if not sid or not resource:
            continue
        comment = _comment_above(lines, index)
        if not comment and index > 0 and _STATEMENT_LINE.match(lines[index - 1]):
            comment = _comment_above(lines, index - 1)
        if comment:
            found[(resource, sid.group(1).strip("\"'"))] = comment
    return found


def _comment_above(lines: list[str], index: int) -> str:
    collected: list[str] = []
    cursor = index - 1
    while cursor >= 0 and lines[cursor].strip().startswith("#"):
        collected.insert(0, lines[cursor].strip().lstrip("#").strip())
        cursor -= 1
    return " ".join(collected)


# ------------------------------------------------------------------ reading it back


def symbolic(text: str, stack: Stack) -> str:
    """An ARN or pattern with the local stack's physical names, account and region as ``${…}`` placeholders."""
    names: dict[str, str] = {}
    for logical_id, name in [*stack.tables.items(), *stack.buckets.items()]:
        names[name] = f"${{{logical_id}}}"
    for logical_id, arn in stack.state_machine_arns.items():
        names[arn.rsplit(":", 1)[1]] = f"${{{logical_id}}}"
    names[stack.account] = "${AWS::AccountId}"
    names[f":{stack.region}:"] = ":${AWS::Region}:"
    for physical in sorted(names, key=len, reverse=True):
        text = text.replace(physical, names[physical])
    return text


def resource_kind(resource: str, stack: Stack) -> str:
    """A resource as a kind, for reports: an object's first key segment, an execution's machine."""
    text = symbolic(resource, stack)
    if text.startswith("arn:aws:s3:::") and "/" in text:
        bucket, _, key = text.partition("/")
        return f"{bucket}/{key.split('/', 1)[0]}/*"
    if ":execution:" in text:
        return text.rsplit(":", 1)[0] + ":*"
    return text
