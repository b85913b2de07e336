"""Create the stack's stateful resources from ``template.yaml`` on the current AWS endpoint (moto).

The template is the single source of truth: tables, buckets and state machines are created from its
``Properties`` (not from a copy), so a change to the template is a change to every local run.

Physical names follow CloudFormation's habit of ``<stack>-<LogicalId>``:

* DynamoDB tables and state machines: ``<stack>-<LogicalId>[-<suffix>]`` (case kept).
* S3 buckets: ``<stack>-<logicalid>-<suffix>`` lowercased; the suffix defaults to a fresh random token
  because bucket names are global.
* ``AWS::S3::BucketPolicy`` is resolved but not applied (moto would deny every object request under the
  TLS-only statement: it evaluates Deny conditions without the request's ``aws:SecureTransport``).
* KMS keys: created with the template's KeySpec, KeyUsage, description and key policy (moto signs and verifies
  with them; it does not enforce key policies); aliases by their ``AliasName`` (``-<suffix>`` appended when a
  suffix is given, alias names being per account and region).
* Lambda functions: the logical id itself (``arn:aws:lambda:<region>:<account>:function:<LogicalId>``);
  they are not created in moto, :mod:`devstack.lambdas` dispatches them in-process.

* Cognito user pools, their resource servers, app clients and domains (``CreateUserPool=true``): on moto's
  cognito-idp, by :mod:`devstack.user_pool`.
* EventBridge event buses: by their ``Name`` (``-<suffix>`` appended when a suffix is given), each with the local
  recorder of :mod:`devstack.event_log` (a rule to a log group) that ``packyard events`` reads.
* A resource whose ``Condition`` is false is not created (nor named), as CloudFormation skips it.

An explicit ``TableName`` / ``BucketName`` / ``StateMachineName`` (``Name``) property wins, as on AWS.
Only the intrinsic functions this template uses are resolved; anything else raises
:class:`UnsupportedTemplateError` naming the resource and the function.

Why one module of ~580 lines: it is a small CloudFormation interpreter (intrinsics, physical names, one
creator per resource type) whose pieces all share the resolution context; split, each would import the rest.
"""

from __future__ import annotations

import functools
import json
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from cfnlint.decode import cfn_yaml
from moto.core.models import botocore_stubber

from devstack import event_log, user_pool

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEMPLATE = ROOT / "template.yaml"
DEFAULT_STACK_NAME = "packyard"

TABLE_TYPES = {"AWS::DynamoDB::Table"}
BUCKET_TYPES = {"AWS::S3::Bucket"}
BUCKET_POLICY_TYPES = {"AWS::S3::BucketPolicy"}
STATE_MACHINE_TYPES = {"AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine"}
FUNCTION_TYPES = {"AWS::Serverless::Function"}
KEY_TYPES = {"AWS::KMS::Key"}
EVENT_BUS_TYPES = {"AWS::Events::EventBus"}
ALIAS_TYPES = {"AWS::KMS::Alias"}

_SUB_PATTERN = re.compile(r"\$\{([^}]+)\}")


class UnsupportedTemplateError(ValueError):
    """The template uses something the local stack cannot reproduce faithfully."""


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as the template declares it (Globals merged), for in-process dispatch."""

    logical_id: str
    name: str
    arn: str
    code_uri: Path
    handler: str
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout: int = 3
    memory_size: int = 128
    reserved_concurrency: int | None = None  # ReservedConcurrentExecutions (None: unreserved); devstack.limits


@dataclass(frozen=True)
class Stack:
    """What :func:`create_stack` created, and what a handler needs to find it."""

    name: str
    region: str
    account: str
    root: Path
    table_name: str
    bucket_name: str
    tables: Mapping[str, str]
    buckets: Mapping[str, str]
    state_machine_arns: Mapping[str, str]
    functions: Mapping[str, FunctionSpec]
    parameters: Mapping[str, str]
    keys: Mapping[str, str] = field(default_factory=dict)
    """KMS keys: logical id → key ARN."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """KMS aliases: logical id → alias name (``alias/…``)."""
    event_buses: Mapping[str, str] = field(default_factory=dict)
    """EventBridge buses: logical id → bus name."""
    event_logs: Mapping[str, str] = field(default_factory=dict)
    """EventBridge buses: logical id → the log group recording their Packyard events (devstack.event_log)."""
    user_pools: Mapping[str, str] = field(default_factory=dict)
    """Cognito user pools, resource servers, app clients, domains: logical id → physical id (devstack.user_pool)."""

    def environment(self) -> dict[str, str]:
        """Environment variables every handler of the stack sees (Globals + each function's own).

        Functions share one process locally, so this is the union; a variable that two functions
        set to different values is an error rather than a silent pick.
        """
        env: dict[str, str] = {"AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}
        owners: dict[str, str] = {}
        for logical_id, spec in sorted(self.functions.items()):
            for key, value in spec.environment.items():
                if key in env and env[key] != value and key in owners:
                    raise UnsupportedTemplateError(
                        f"{key} differs between {owners[key]} ({env[key]!r}) and {logical_id} ({value!r})"
                    )
                env[key] = value
                owners[key] = logical_id
        return env


# ------------------------------------------------------------------ loading


def load_template(path: str | Path = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """Parse a CloudFormation/SAM YAML template (``!Ref``, ``!GetAtt``, ``!Sub`` …) into plain Python values."""
    document: dict[str, Any] = _plain(cfn_yaml.load(str(path)))
    return document


def _plain(value: Any) -> Any:
    # cfn-lint returns str/dict/list subclasses that carry line marks; hand out plain builtins.
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


# ------------------------------------------------------------------ intrinsics


class _Resolver:
    """Resolves the intrinsic functions the template uses, against physical names known up front."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        region: str,
        account: str,
        parameters: Mapping[str, str],
    ) -> None:
        self.template = template
        self.resources: Mapping[str, Any] = template.get("Resources", {})
        self.region = region
        self.account = account
        self.pseudo = {
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": "aws",
            "AWS::StackName": stack_name,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": None,
        }
        self.parameters = dict(parameters)
        self.refs: dict[str, str] = {}
        self.attributes: dict[tuple[str, str], str] = {}

    def resolve(self, value: Any, where: str) -> Any:
        if isinstance(value, list):
            return [self.resolve(v, where) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), *_ = value.items()
            if key == "Ref":
                return self.ref(arg, where)
            if key == "Fn::GetAtt":
                return self.get_att(arg, where)
            if key == "Fn::Sub":
                return self.sub(arg, where)
            if key == "Fn::If":
                condition, if_true, if_false = arg
                return self.resolve(if_true if self.condition(condition, where) else if_false, where)
            if key == "Fn::Select":
                index, items = self.resolve(arg[0], where), self.resolve(arg[1], where)
                if not isinstance(items, list) or not 0 <= int(index) < len(items):
                    raise UnsupportedTemplateError(f"{where}: Fn::Select index {index} is out of range")
                return items[int(index)]
            if key.startswith("Fn::") or key == "Condition":
                raise UnsupportedTemplateError(f"{where}: intrinsic {key} is not supported by the local stack")
        resolved = {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        # a property whose value is AWS::NoValue is absent, as CloudFormation removes it
        return {k: v for k, v in resolved.items() if not (v is None and isinstance(value[k], dict))}

    def active(self, resource: Mapping[str, Any], where: str) -> bool:
        """Whether CloudFormation creates ``resource``: it has no ``Condition``, or its condition holds."""
        return "Condition" not in resource or self.condition(resource["Condition"], where)

    def condition(self, name: str, where: str) -> bool:
        """A named condition of the template's ``Conditions``, evaluated with the stack's parameters."""
        declared = self.template.get("Conditions", {})
        if name not in declared:
            raise UnsupportedTemplateError(f"{where}: condition {name} is not declared")
        return self._truth(declared[name], f"Conditions.{name}")

    def _truth(self, value: Any, where: str) -> bool:
        if isinstance(value, dict) and len(value) == 1:
            (key, arg), *_ = value.items()
            if key == "Condition":
                return self.condition(arg, where)
            if key == "Fn::Equals":
                left, right = (str(self.resolve(v, where)) for v in arg)
                return left == right
            if key == "Fn::Not":
                return not self._truth(arg[0], where)
            if key == "Fn::And":
                return all(self._truth(v, where) for v in arg)
            if key == "Fn::Or":
                return any(self._truth(v, where) for v in arg)
        raise UnsupportedTemplateError(f"{where}: condition function {value!r} is not supported by the local stack")

    def ref(self, name: str, where: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        declared = self.template.get("Parameters", {}).get(name)
        if declared is not None:
            raise UnsupportedTemplateError(f"{where}: parameter {name} has no default; pass parameters={{{name!r}: …}}")
        if name in self.refs:
            return self.refs[name]
        raise UnsupportedTemplateError(f"{where}: Ref {name} names nothing the local stack creates")

    def get_att(self, arg: Any, where: str) -> str:
        if isinstance(arg, str):
            logical_id, _, attribute = arg.partition(".")
        else:
            logical_id, attribute = arg
        try:
            return self.attributes[(logical_id, attribute)]
        except KeyError:
            raise UnsupportedTemplateError(
                f"{where}: Fn::GetAtt {logical_id}.{attribute} is not supported by the local stack"
            ) from None

    def sub(self, arg: Any, where: str) -> str:
        if isinstance(arg, list):
            text, variables = arg[0], {k: self.resolve(v, where) for k, v in arg[1].items()}
        else:
            text, variables = arg, {}

        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            if token.startswith("!"):
                return "${" + token[1:] + "}"
            if token in variables:
                return str(variables[token])
            if "." in token and not token.startswith("AWS::"):
                return self.get_att(token, where)
            return str(self.ref(token, where))

        return _SUB_PATTERN.sub(replace, text)


def _parameters(template: Mapping[str, Any], overrides: Mapping[str, str] | None) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, declared in template.get("Parameters", {}).items():
        if "Default" in declared:
            values[name] = declared["Default"]
    for name, value in (overrides or {}).items():
        if name not in template.get("Parameters", {}):
            raise UnsupportedTemplateError(f"unknown parameter {name}")
        values[name] = value
    for name, declared in template.get("Parameters", {}).items():
        if name in values and declared.get("Type") == "CommaDelimitedList" and isinstance(values[name], str):
            values[name] = [part.strip() for part in values[name].split(",")]  # type: ignore[assignment]
    return values


# ------------------------------------------------------------------ state machine definitions


def render_definition(definition: str | Mapping[str, Any], substitutions: Mapping[str, str]) -> str:
    """Apply ``DefinitionSubstitutions`` the way CloudFormation does: ``${Name}`` → value, textually.

    A placeholder without a substitution is an error (AWS refuses such a definition at deploy time).
    """
    text = definition if isinstance(definition, str) else json.dumps(definition)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in substitutions:
            raise UnsupportedTemplateError(f"state machine definition uses ${{{name}}} but no substitution is given")
        return str(substitutions[name])

    rendered = _SUB_PATTERN.sub(replace, text)
    json.loads(rendered)  # fail here, with a JSON error, rather than inside moto's ASL parser
    return rendered


def create_state_machine(
    sfn: Any,
    *,
    name: str,
    definition: str | Path | Mapping[str, Any],
    substitutions: Mapping[str, str] | None = None,
    role_arn: str,
    machine_type: str = "STANDARD",
) -> str:
    """Create one state machine from an ASL file/text/dict with substitutions resolved; return its ARN.

    Used for the template's state machines and for throwaway definitions in tests alike.
    """
    source: str | Mapping[str, Any] = definition.read_text("utf-8") if isinstance(definition, Path) else definition
    body = render_definition(source, substitutions or {})
    response = sfn.create_state_machine(name=name, definition=body, roleArn=role_arn, type=machine_type)
    return str(response["stateMachineArn"])


# ------------------------------------------------------------------ resources


def _physical_name(stack_name: str, logical_id: str, suffix: str | None) -> str:
    return f"{stack_name}-{logical_id}" + (f"-{suffix}" if suffix else "")


def _bucket_name(stack_name: str, logical_id: str, suffix: str) -> str:
    name = re.sub(r"[^a-z0-9.-]", "-", f"{stack_name}-{logical_id}-{suffix}".lower())
    if len(name) > 63:
        name = name[: 62 - len(suffix)] + "-" + suffix
    return name.strip("-.")


_TABLE_PROPERTIES = {
    "TableName",
    "BillingMode",
    "AttributeDefinitions",
    "KeySchema",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
    "ProvisionedThroughput",
    "StreamSpecification",
    "SSESpecification",
    "TimeToLiveSpecification",
    "PointInTimeRecoverySpecification",
    "DeletionProtectionEnabled",
    "TableClass",
    "Tags",
}


def _create_table(ddb: Any, logical_id: str, name: str, props: Mapping[str, Any]) -> None:
    unknown = set(props) - _TABLE_PROPERTIES
    if unknown:
        raise UnsupportedTemplateError(f"{logical_id}: table properties {sorted(unknown)} are not reproduced locally")
    request: dict[str, Any] = {
        "TableName": name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "ProvisionedThroughput", "TableClass", "Tags"):
        if key in props:
            request[key] = props[key]
    if "DeletionProtectionEnabled" in props:
        request["DeletionProtectionEnabled"] = bool(props["DeletionProtectionEnabled"])
    if "StreamSpecification" in props:
        request["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    sse = props.get("SSESpecification")
    if sse:
        request["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled"))} | {
            k: v for k, v in sse.items() if k in ("SSEType", "KMSMasterKeyId")
        }
    ddb.create_table(**request)

    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        ddb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    pitr = props.get("PointInTimeRecoverySpecification")
    if pitr and pitr.get("PointInTimeRecoveryEnabled"):
        ddb.update_continuous_backups(
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )


_BUCKET_PROPERTIES = {
    "BucketName",
    "PublicAccessBlockConfiguration",
    "BucketEncryption",
    "OwnershipControls",
    "LifecycleConfiguration",
    "VersioningConfiguration",
    "Tags",
}


def _lifecycle_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    # CloudFormation's shorthand (Prefix, ExpirationInDays, …) → the S3 API's rule shape.
    out: dict[str, Any] = {"Status": rule["Status"], "Filter": {"Prefix": rule.get("Prefix", "")}}
    if "Id" in rule:
        out["ID"] = rule["Id"]
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": int(rule["ExpirationInDays"])}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = {
            "DaysAfterInitiation": int(rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"])
        }
    if "NoncurrentVersionExpirationInDays" in rule:
        out["NoncurrentVersionExpiration"] = {"NoncurrentDays": int(rule["NoncurrentVersionExpirationInDays"])}
    unknown = set(rule) - {
        "Id",
        "Status",
        "Prefix",
        "ExpirationInDays",
        "AbortIncompleteMultipartUpload",
        "NoncurrentVersionExpirationInDays",
    }
    if unknown:
        raise UnsupportedTemplateError(f"lifecycle rule fields {sorted(unknown)} are not reproduced locally")
    return out


def _encryption_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    # CloudFormation says ServerSideEncryptionByDefault where the S3 API says ApplyServerSideEncryptionByDefault.
    out: dict[str, Any] = {"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"]}
    if "BucketKeyEnabled" in rule:
        out["BucketKeyEnabled"] = bool(rule["BucketKeyEnabled"])
    return out


def _create_bucket(s3: Any, region: str, logical_id: str, name: str, props: Mapping[str, Any]) -> None:
    unknown = set(props) - _BUCKET_PROPERTIES
    if unknown:
        raise UnsupportedTemplateError(f"{logical_id}: bucket properties {sorted(unknown)} are not reproduced locally")
    if region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
    if "OwnershipControls" in props:
        s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
    if "PublicAccessBlockConfiguration" in props:
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
    if "BucketEncryption" in props:
        s3.put_bucket_encryption(
            Bucket=name,
            ServerSideEncryptionConfiguration={
                "Rules": [_encryption_rule(r) for r in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]]
            },
        )
    if "VersioningConfiguration" in props:
        s3.put_bucket_versioning(
            Bucket=name, VersioningConfiguration={"Status": props["VersioningConfiguration"]["Status"]}
        )
    if "LifecycleConfiguration" in props:
        s3.put_bucket_lifecycle_configuration(
            Bucket=name,
            LifecycleConfiguration={"Rules": [_lifecycle_rule(r) for r in props["LifecycleConfiguration"]["Rules"]]},
        )
    if "Tags" in props:
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": props["Tags"]})


_KEY_PROPERTIES = {"Description", "KeySpec", "KeyUsage", "KeyPolicy", "Enabled", "EnableKeyRotation", "Tags"}


def _create_key(kms: Any, logical_id: str, props: Mapping[str, Any]) -> str:
    """Create one KMS key; its ARN (moto picks the key id, as KMS does)."""
    unknown = set(props) - _KEY_PROPERTIES
    if unknown:
        raise UnsupportedTemplateError(f"{logical_id}: KMS key properties {sorted(unknown)} are not reproduced locally")
    request: dict[str, Any] = {
        "KeySpec": props.get("KeySpec", "SYMMETRIC_DEFAULT"),
        "KeyUsage": props.get("KeyUsage", "ENCRYPT_DECRYPT"),
    }
    if "Description" in props:
        request["Description"] = props["Description"]
    if "KeyPolicy" in props:
        policy = props["KeyPolicy"]
        request["Policy"] = policy if isinstance(policy, str) else json.dumps(policy)
    if "Tags" in props:
        request["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in props["Tags"]]
    key = kms.create_key(**request)["KeyMetadata"]
    if props.get("Enabled") is False:
        kms.disable_key(KeyId=key["KeyId"])
    return str(key["Arn"])


def _state_machine_source(root: Path, logical_id: str, resource: Mapping[str, Any], resolver: _Resolver) -> Any:
    props = resource.get("Properties", {})
    if resource["Type"] == "AWS::Serverless::StateMachine":
        if "DefinitionUri" in props:
            if not isinstance(props["DefinitionUri"], str):
                raise UnsupportedTemplateError(f"{logical_id}: only a local DefinitionUri file is supported")
            return root / props["DefinitionUri"]
        if "Definition" in props:
            return props["Definition"]
    else:
        if "DefinitionString" in props:
            return resolver.resolve(props["DefinitionString"], f"{logical_id}.DefinitionString")
        if "Definition" in props:
            return props["Definition"]
    raise UnsupportedTemplateError(f"{logical_id}: no local definition (DefinitionUri file or inline Definition)")


def _merged_function(globals_: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**globals_, **props}
    variables = {
        **globals_.get("Environment", {}).get("Variables", {}),
        **props.get("Environment", {}).get("Variables", {}),
    }
    merged["Environment"] = {"Variables": variables}
    return merged


def _reserved(resolver: _Resolver, logical_id: str, merged: Mapping[str, Any]) -> int | None:
    """The function's ReservedConcurrentExecutions as the template resolves it (None: not reserved)."""
    value = resolver.resolve({"v": merged.get("ReservedConcurrentExecutions")}, logical_id).get("v")
    return None if value is None else int(value)


# ------------------------------------------------------------------ the stack


@functools.cache
def _local_session() -> boto3.session.Session:
    # One session for every stack created in this process: its loader caches the service models and
    # endpoint data (~0.3 s to parse per fresh session). It resolves credentials once; only moto ever
    # sees them (start_local_aws sets fake ones first).
    return boto3.session.Session()


def create_stack(
    template: str | Path = DEFAULT_TEMPLATE,
    *,
    region: str = "us-east-1",
    stack_name: str = DEFAULT_STACK_NAME,
    suffix: str | None = None,
    parameters: Mapping[str, str] | None = None,
    session: boto3.session.Session | None = None,
    endpoint_url: str | None = None,
) -> Stack:
    """Create the template's tables, buckets, bucket policies and state machines on the current endpoint.

    ``session``/``endpoint_url`` select the endpoint (default: boto3's default session, i.e. an active
    ``mock_aws`` in-process, or a moto server when ``endpoint_url`` points at it). ``suffix`` is appended to
    every physical name (use it to create the stack twice on one long-lived moto server).
    """
    if endpoint_url is None and not os.environ.get("AWS_ENDPOINT_URL") and not botocore_stubber.enabled:
        raise RuntimeError("no moto endpoint: start mock_aws, or pass endpoint_url of a moto server (never real AWS)")
    template_path = Path(template).resolve()
    root = template_path.parent
    doc = load_template(template_path)
    resources: Mapping[str, Any] = doc.get("Resources", {})
    session = session or _local_session()

    def client(service: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint_url)

    account = client("sts").get_caller_identity()["Account"]
    resolver = _Resolver(
        doc,
        stack_name=stack_name,
        region=region,
        account=account,
        parameters=_parameters(doc, parameters),
    )

    # what CloudFormation would create: a resource whose Condition is false is neither created nor named
    resources = {k: v for k, v in resources.items() if resolver.active(v, k)}

    # Physical names first, so every Ref/GetAtt resolves whatever the creation order.
    tables: dict[str, str] = {}
    buckets: dict[str, str] = {}
    machine_names: dict[str, str] = {}
    aliases: dict[str, str] = {}
    event_buses: dict[str, str] = {}
    bucket_suffix = suffix or uuid.uuid4().hex[:12]
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind in TABLE_TYPES:
            name = props.get("TableName") or _physical_name(stack_name, logical_id, suffix)
            tables[logical_id] = resolver.refs[logical_id] = name
            resolver.attributes[(logical_id, "Arn")] = f"arn:aws:dynamodb:{region}:{account}:table/{name}"
        elif kind in BUCKET_TYPES:
            name = props.get("BucketName") or _bucket_name(stack_name, logical_id, bucket_suffix)
            buckets[logical_id] = resolver.refs[logical_id] = name
            resolver.attributes[(logical_id, "Arn")] = f"arn:aws:s3:::{name}"
        elif kind in STATE_MACHINE_TYPES:
            name = props.get("Name") or props.get("StateMachineName") or _physical_name(stack_name, logical_id, suffix)
            arn = f"arn:aws:states:{region}:{account}:stateMachine:{name}"
            machine_names[logical_id] = name
            resolver.refs[logical_id] = arn
            resolver.attributes[(logical_id, "Name")] = name
            resolver.attributes[(logical_id, "Arn")] = arn
        elif kind in ALIAS_TYPES:
            name = str(resolver.resolve(props["AliasName"], f"{logical_id}.AliasName"))
            name += f"-{suffix}" if suffix else ""
            aliases[logical_id] = resolver.refs[logical_id] = name
            resolver.attributes[(logical_id, "Arn")] = f"arn:aws:kms:{region}:{account}:{name}"
        elif kind in EVENT_BUS_TYPES:
            name = str(resolver.resolve(props["Name"], f"{logical_id}.Name")) + (f"-{suffix}" if suffix else "")
            event_buses[logical_id] = resolver.refs[logical_id] = name
            resolver.attributes[(logical_id, "Name")] = name
            resolver.attributes[(logical_id, "Arn")] = f"arn:aws:events:{region}:{account}:event-bus/{name}"
        elif kind in FUNCTION_TYPES:
            arn = f"arn:aws:lambda:{region}:{account}:function:{logical_id}"
            resolver.refs[logical_id] = logical_id
            resolver.attributes[(logical_id, "Arn")] = arn

    ddb, s3, sfn = client("dynamodb"), client("s3"), client("stepfunctions")
    for logical_id, name in tables.items():
        props = resolver.resolve(resources[logical_id].get("Properties", {}), logical_id)
        _create_table(ddb, logical_id, name, props)
    for logical_id, name in buckets.items():
        props = resolver.resolve(resources[logical_id].get("Properties", {}), logical_id)
        _create_bucket(s3, region, logical_id, name, props)
    # AWS::S3::BucketPolicy is deliberately not applied: moto evaluates bucket-policy Deny statements
    # without request context, so the TLS-only statement (aws:SecureTransport = false) would deny every
    # object request. Its resolution is still checked, so a broken reference fails here too.
    for logical_id, resource in resources.items():
        if resource["Type"] in BUCKET_POLICY_TYPES:
            resolver.resolve(resource["Properties"], logical_id)
    keys: dict[str, str] = {}
    kms = client("kms")
    for logical_id, resource in resources.items():
        if resource["Type"] in KEY_TYPES:
            arn = _create_key(kms, logical_id, resolver.resolve(resource.get("Properties", {}), logical_id))
            resolver.refs[logical_id] = arn.rsplit("/", 1)[1]
            resolver.attributes[(logical_id, "Arn")] = arn
            resolver.attributes[(logical_id, "KeyId")] = arn.rsplit("/", 1)[1]
            keys[logical_id] = arn
    for logical_id, name in aliases.items():
        target = resolver.resolve(resources[logical_id]["Properties"]["TargetKeyId"], f"{logical_id}.TargetKeyId")
        kms.create_alias(AliasName=name, TargetKeyId=target)

    event_logs: dict[str, str] = {}
    events, logs = client("events"), client("logs")
    for logical_id, name in event_buses.items():
        props = resolver.resolve(resources[logical_id].get("Properties", {}), logical_id)
        unknown = set(props) - {"Name", "Description", "Tags"}
        if unknown:
            raise UnsupportedTemplateError(f"{logical_id}: event bus properties {sorted(unknown)} are not reproduced")
        request = {"Name": name, "Tags": props.get("Tags", [])} | (
            {"Description": props["Description"]} if "Description" in props else {}
        )
        events.create_event_bus(**request)
        event_logs[logical_id] = event_log.record(events, logs, name, region=region, account=account)

    state_machine_arns: dict[str, str] = {}
    for logical_id, name in machine_names.items():
        resource = resources[logical_id]
        props = resource.get("Properties", {})
        substitutions = resolver.resolve(
            props.get("DefinitionSubstitutions", {}), f"{logical_id}.DefinitionSubstitutions"
        )
        state_machine_arns[logical_id] = create_state_machine(
            sfn,
            name=name,
            definition=_state_machine_source(root, logical_id, resource, resolver),
            substitutions=substitutions,
            role_arn=f"arn:aws:iam::{account}:role/{_physical_name(stack_name, logical_id, suffix)}Role",
            machine_type=props.get("Type", "STANDARD"),
        )
        resolver.refs[logical_id] = state_machine_arns[logical_id]
        resolver.attributes[(logical_id, "Arn")] = state_machine_arns[logical_id]

    globals_ = doc.get("Globals", {}).get("Function", {})
    functions: dict[str, FunctionSpec] = {}
    for logical_id, resource in resources.items():
        if resource["Type"] not in FUNCTION_TYPES:
            continue
        merged = _merged_function(globals_, resource.get("Properties", {}))
        variables = resolver.resolve(merged["Environment"]["Variables"], f"{logical_id}.Environment")
        functions[logical_id] = FunctionSpec(
            logical_id=logical_id,
            name=logical_id,
            arn=resolver.attributes[(logical_id, "Arn")],
            code_uri=root / merged["CodeUri"],
            handler=merged["Handler"],
            environment={k: str(v) for k, v in variables.items()},
            timeout=int(merged.get("Timeout", 3)),
            memory_size=int(merged.get("MemorySize", 128)),
            reserved_concurrency=_reserved(resolver, logical_id, merged),
        )

    def remember(logical_id: str, physical: str, attributes: Mapping[str, str]) -> None:
        resolver.refs[logical_id] = physical
        resolver.attributes.update({(logical_id, name): value for name, value in attributes.items()})

    user_pools = user_pool.create_user_pools(client("cognito-idp"), resources, resolver.resolve, remember, region)

    return Stack(
        name=stack_name,
        region=region,
        account=account,
        root=root,
        table_name=next(iter(tables.values()), ""),
        bucket_name=next(iter(buckets.values()), ""),
        tables=tables,
        buckets=buckets,
        state_machine_arns=state_machine_arns,
        functions=functions,
        parameters={k: v for k, v in resolver.parameters.items() if isinstance(v, str)},
        keys=keys,
        aliases=aliases,
        event_buses=event_buses,
        event_logs=event_logs,
        user_pools=user_pools,
    )
