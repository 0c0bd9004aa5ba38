"""Read ``template.yaml`` for the local stack and the tests.

One schema: every table, bucket, route and stream event source used locally comes from the SAM
template itself. This module knows just enough CloudFormation to do that:

- :func:`load_template` — YAML with the CloudFormation short tags (``!Ref``, ``!Sub``, ``!GetAtt``…)
  turned into their long forms (``{"Ref": …}``, ``{"Fn::Sub": …}``…);
- :func:`resolve` — evaluates intrinsics against a :class:`Context` (parameters, pseudo parameters,
  logical ids → local physical names and ARNs);
- :func:`table_definitions` / :func:`create_tables` / :func:`create_buckets` — the template's
  ``AWS::DynamoDB::Table`` and ``AWS::S3::Bucket`` resources on moto (in-process or server);
- :func:`functions` / :func:`environment` — the ``AWS::Serverless::Function`` resources with their
  routes, stream event sources and resolved environment.
"""
from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import yaml

log = logging.getLogger("lakeq.local.template")

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
LOCAL_STACK = "lakeq-local"
DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "123456789012"  # moto's default account
DEFAULT_ADMIN_KEY = "local-admin-key"
LOCAL_API_ID = "local"

# ---------------------------------------------------------------------------------------- loading


class Template(dict):
    """A template as a plain dict, remembering the file it came from (``.path``, may be None)."""

    path: Path | None = None

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path is not None else REPO_ROOT


class CfnLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader that understands CloudFormation's short-form intrinsic tags (libyaml's when
    PyYAML has it: template.yaml parses in ~0.15 s instead of ~1.3 s, the same document)."""


def _construct_tag(loader: CfnLoader, tag_suffix: str, node: yaml.Node) -> Any:
    name = tag_suffix
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if name == "Ref":
        return {"Ref": value}
    if name == "Condition":
        return {"Condition": value}
    if name == "GetAtt" and isinstance(value, str):
        logical, _, attr = value.partition(".")
        value = [logical, attr]
    return {f"Fn::{name}": value}


CfnLoader.add_multi_constructor("!", _construct_tag)


def load_template(source: str | os.PathLike | Mapping | None = None) -> Template:
    """Load a template from a path (default: the repo's ``template.yaml``), YAML text or a dict."""
    if source is None:
        source = TEMPLATE_PATH
    if isinstance(source, Template):
        return source
    if isinstance(source, Mapping):
        t = Template(copy.deepcopy(dict(source)))
        return t
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source):
        path = Path(source).resolve()
        with open(path, encoding="utf-8") as fh:
            t = Template(yaml.load(fh, Loader=CfnLoader) or {})
        t.path = path
        return t
    return Template(yaml.load(source, Loader=CfnLoader) or {})


def loads(text: str) -> Any:
    """Parse YAML text with CloudFormation tags (any document, not only templates)."""
    return yaml.load(text, Loader=CfnLoader)


# ------------------------------------------------------------------------------------- resolution


class _NoValue:
    def __repr__(self) -> str:  # pragma: no cover
        return "AWS::NoValue"


NO_VALUE = _NoValue()


@dataclass
class Context:
    """What :func:`resolve` needs: the template, the stack name, parameters and pseudo parameters.

    ``attributes`` overrides ``Fn::GetAtt`` results (``{("SegmentsTable", "StreamArn"): arn}``),
    filled from moto by :func:`create_tables` so stream ARNs are the real local ones.
    """

    template: Mapping
    stack_name: str = LOCAL_STACK
    parameters: dict[str, Any] = field(default_factory=dict)
    region: str = DEFAULT_REGION
    account_id: str = DEFAULT_ACCOUNT
    attributes: dict[tuple[str, str], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        params: dict[str, Any] = {}
        for name, decl in (self.template.get("Parameters") or {}).items():
            if "Default" in (decl or {}):
                params[name] = decl["Default"]
        params.update(self.parameters)
        self.parameters = params

    @property
    def resources(self) -> Mapping[str, Any]:
        return self.template.get("Resources") or {}

    def pseudo(self, name: str) -> Any:
        table = {
            "AWS::StackName": self.stack_name,
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/"
            f"{self.stack_name}/00000000-0000-0000-0000-000000000000",
            "AWS::NotificationARNs": [],
            "AWS::NoValue": NO_VALUE,
        }
        if name not in table:
            raise KeyError(f"unknown pseudo parameter {name}")
        return table[name]

    # ----- physical names and attributes of resources
    def physical_name(self, logical_id: str, _seen: frozenset = frozenset()) -> str:
        if logical_id in _seen:
            raise ValueError(f"circular reference through {logical_id}")
        res = self.resources.get(logical_id)
        if res is None:
            raise KeyError(f"unknown logical id {logical_id}")
        rtype = res.get("Type", "")
        props = res.get("Properties") or {}
        name_prop = {
            "AWS::DynamoDB::Table": "TableName",
            "AWS::S3::Bucket": "BucketName",
            "AWS::Serverless::Function": "FunctionName",
            "AWS::Lambda::Function": "FunctionName",
            "AWS::SQS::Queue": "QueueName",
            "AWS::SNS::Topic": "TopicName",
            "AWS::Glue::Job": "Name",
            "AWS::Glue::Database": "DatabaseInput",
            "AWS::SecretsManager::Secret": "Name",
            "AWS::ApiGatewayV2::Stage": "StageName",  # a stage's Ref is its name
        }.get(rtype)
        if name_prop and name_prop in props:
            value = _resolve(props[name_prop], self, _seen | {logical_id})
            if isinstance(value, dict) and "Name" in value:  # Glue DatabaseInput
                value = value["Name"]
            if isinstance(value, str):
                return value
        if rtype == "AWS::S3::Bucket":
            return f"{self.stack_name}-{logical_id}".lower()
        if rtype in ("AWS::Serverless::HttpApi", "AWS::ApiGatewayV2::Api"):
            return LOCAL_API_ID
        if rtype in ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion"):
            return f"arn:aws:lambda:{self.region}:{self.account_id}:layer:{self.stack_name}-{logical_id}:1"
        return f"{self.stack_name}-{logical_id}"

    def get_att(self, logical_id: str, attr: str) -> Any:
        if (logical_id, attr) in self.attributes:
            return self.attributes[(logical_id, attr)]
        res = self.resources.get(logical_id)
        if res is None:
            raise KeyError(f"unknown logical id {logical_id}")
        rtype = res.get("Type", "")
        name = self.physical_name(logical_id)
        r, a = self.region, self.account_id
        if rtype == "AWS::DynamoDB::Table":
            arn = f"arn:aws:dynamodb:{r}:{a}:table/{name}"
            if attr == "Arn":
                return arn
            if attr == "StreamArn":
                return f"{arn}/stream/local"
        if rtype == "AWS::S3::Bucket":
            return {
                "Arn": f"arn:aws:s3:::{name}",
                "DomainName": f"{name}.s3.amazonaws.com",
                "RegionalDomainName": f"{name}.s3.{r}.amazonaws.com",
                "WebsiteURL": f"http://{name}.s3-website-{r}.amazonaws.com",
            }.get(attr, f"{name}.{attr}")
        if rtype in ("AWS::Serverless::Function", "AWS::Lambda::Function") and attr == "Arn":
            return f"arn:aws:lambda:{r}:{a}:function:{name}"
        if rtype == "AWS::SQS::Queue":
            return {"Arn": f"arn:aws:sqs:{r}:{a}:{name}", "QueueName": name}.get(attr, name)
        if attr == "Arn":
            return f"arn:aws:local:{r}:{a}:{logical_id}/{name}"
        log.warning("GetAtt %s.%s has no local value; using a placeholder", logical_id, attr)
        return f"{name}.{attr}"

    # ----- conditions
    def condition(self, name: str) -> bool:
        conds = self.template.get("Conditions") or {}
        if name not in conds:
            raise KeyError(f"unknown condition {name}")
        return bool(_resolve(conds[name], self, frozenset()))


_INTRINSICS = {
    "Ref", "Condition", "Fn::Sub", "Fn::GetAtt", "Fn::Join", "Fn::If", "Fn::Select", "Fn::Split",
    "Fn::Equals", "Fn::And", "Fn::Or", "Fn::Not", "Fn::FindInMap", "Fn::Base64", "Fn::GetAZs",
    "Fn::ImportValue", "Fn::ToJsonString", "Fn::Length",
}

_SUB_VAR = re.compile(r"\$\{([^}]*)\}")


def resolve(value: Any, ctx: Context) -> Any:
    """Evaluate every intrinsic function in ``value`` (dicts and lists recursively)."""
    out = _resolve(value, ctx, frozenset())
    return None if out is NO_VALUE else out


def _ref(name: str, ctx: Context, seen: frozenset) -> Any:
    if name.startswith("AWS::"):
        return ctx.pseudo(name)
    if name in ctx.parameters:
        return ctx.parameters[name]
    if name in (ctx.template.get("Parameters") or {}):
        raise KeyError(f"parameter {name} has no value and no Default")
    if (ctx.resources.get(name) or {}).get("Type") == "AWS::SecretsManager::Secret":
        return secret_arn(ctx, name, seen)  # a secret's Ref is its ARN
    return ctx.physical_name(name, seen)


def _sub(template_str: str, variables: Mapping[str, Any], ctx: Context, seen: frozenset) -> str:
    def repl(m: re.Match) -> str:
        expr = m.group(1)
        if expr.startswith("!"):
            return "${" + expr[1:] + "}"
        expr = expr.strip()
        if expr in variables:
            v = variables[expr]
        elif "." in expr and not expr.startswith("AWS::"):
            logical, _, attr = expr.partition(".")
            v = ctx.get_att(logical, attr)
        else:
            v = _ref(expr, ctx, seen)
        return str(v)

    return _SUB_VAR.sub(repl, template_str)


def _resolve(value: Any, ctx: Context, seen: frozenset) -> Any:
    if isinstance(value, list):
        items = [_resolve(v, ctx, seen) for v in value]
        return [v for v in items if v is not NO_VALUE]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, arg), = value.items()
        if key in _INTRINSICS:
            return _intrinsic(key, arg, ctx, seen)
    out = {}
    for k, v in value.items():
        rv = _resolve(v, ctx, seen)
        if rv is not NO_VALUE:
            out[k] = rv
    return out


def _intrinsic(key: str, arg: Any, ctx: Context, seen: frozenset) -> Any:
    if key == "Ref":
        return _ref(_resolve(arg, ctx, seen), ctx, seen)
    if key == "Condition":
        return ctx.condition(arg)
    if key == "Fn::Sub":
        if isinstance(arg, str):
            return _sub(arg, {}, ctx, seen)
        text, variables = arg[0], _resolve(arg[1] if len(arg) > 1 else {}, ctx, seen)
        return _sub(text, variables, ctx, seen)
    if key == "Fn::GetAtt":
        if isinstance(arg, str):
            arg = arg.split(".", 1)
        logical, attr = _resolve(arg[0], ctx, seen), _resolve(arg[1], ctx, seen)
        return ctx.get_att(logical, attr)
    if key == "Fn::Join":
        delim, items = arg
        items = _resolve(items, ctx, seen)
        return str(delim).join(str(i) for i in items)
    if key == "Fn::If":
        cond, yes, no = arg
        return _resolve(yes if ctx.condition(cond) else no, ctx, seen)
    if key == "Fn::Select":
        idx, items = _resolve(arg, ctx, seen)
        return items[int(idx)]
    if key == "Fn::Split":
        delim, text = _resolve(arg, ctx, seen)
        return str(text).split(delim)
    if key == "Fn::Equals":
        a, b = _resolve(arg, ctx, seen)
        return str(a) == str(b) if not isinstance(a, type(b)) else a == b
    if key == "Fn::And":
        return all(_resolve(a, ctx, seen) for a in arg)
    if key == "Fn::Or":
        return any(_resolve(a, ctx, seen) for a in arg)
    if key == "Fn::Not":
        return not _resolve(arg[0], ctx, seen)
    if key == "Fn::FindInMap":
        m, k1, k2 = _resolve(arg, ctx, seen)
        return ctx.template["Mappings"][m][k1][k2]
    if key == "Fn::Base64":
        import base64

        return base64.b64encode(str(_resolve(arg, ctx, seen)).encode()).decode()
    if key == "Fn::GetAZs":
        return [f"{ctx.region}{z}" for z in "abc"]
    if key == "Fn::ImportValue":
        return f"import:{_resolve(arg, ctx, seen)}"
    if key == "Fn::ToJsonString":
        import json

        return json.dumps(_resolve(arg, ctx, seen), separators=(",", ":"))
    if key == "Fn::Length":
        return len(_resolve(arg, ctx, seen))
    raise NotImplementedError(key)  # pragma: no cover


# ------------------------------------------------------------------------------ parameters / env


def admin_key() -> str:
    return os.environ.get("LAKEQ_ADMIN_KEY") or DEFAULT_ADMIN_KEY


def local_parameters(parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parameter values of the local stack: ``AdminKeySha256`` from ``$LAKEQ_ADMIN_KEY``."""
    params: dict[str, Any] = {
        "AdminKeySha256": hashlib.sha256(admin_key().encode("utf-8")).hexdigest()
    }
    params.update(parameters or {})
    return params


def make_context(
    template: Mapping | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
    region: str | None = None,
    account_id: str = DEFAULT_ACCOUNT,
) -> Context:
    template = load_template(template)
    params = local_parameters(parameters)
    for name, decl in (template.get("Parameters") or {}).items():
        if name not in params and "Default" not in (decl or {}):
            log.warning("parameter %s has no local value; using an empty string", name)
            params[name] = ""
    return Context(
        template=template,
        stack_name=stack_name,
        parameters=params,
        region=region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        account_id=account_id,
    )


def _ctx(template: Mapping | Context | None, stack_name: str, parameters: Mapping | None) -> Context:
    if isinstance(template, Context):
        return template
    return make_context(template, stack_name, parameters)


def resources_of_type(template: Mapping, *types: str) -> dict[str, dict]:
    return {
        lid: res
        for lid, res in (template.get("Resources") or {}).items()
        if (res or {}).get("Type") in types
    }


# --------------------------------------------------------------------------------------- tables

_GSI_KEYS = ("IndexName", "KeySchema", "Projection", "ProvisionedThroughput", "OnDemandThroughput")
_LSI_KEYS = ("IndexName", "KeySchema", "Projection")


def table_definitions(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{logical id: create_table kwargs}`` for every ``AWS::DynamoDB::Table`` of the template.

    Only properties that ``create_table`` accepts are kept (SSE is translated; TTL, PITR, tags,
    contributor insights… are dropped — TTL is applied by :func:`create_tables`).
    """
    ctx = _ctx(template, stack_name, parameters)
    out: dict[str, dict[str, Any]] = {}
    for lid, res in resources_of_type(ctx.template, "AWS::DynamoDB::Table").items():
        props = resolve(res.get("Properties") or {}, ctx)
        kw: dict[str, Any] = {
            "TableName": ctx.physical_name(lid),
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        if kw["BillingMode"] == "PROVISIONED":
            kw["ProvisionedThroughput"] = props.get(
                "ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
            )
        if props.get("GlobalSecondaryIndexes"):
            kw["GlobalSecondaryIndexes"] = [
                {k: g[k] for k in _GSI_KEYS if k in g} for g in props["GlobalSecondaryIndexes"]
            ]
            if kw["BillingMode"] == "PAY_PER_REQUEST":
                for g in kw["GlobalSecondaryIndexes"]:
                    g.pop("ProvisionedThroughput", None)
        if props.get("LocalSecondaryIndexes"):
            kw["LocalSecondaryIndexes"] = [
                {k: i[k] for k in _LSI_KEYS if k in i} for i in props["LocalSecondaryIndexes"]
            ]
        spec = props.get("StreamSpecification")
        if spec and spec.get("StreamViewType"):
            kw["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": spec["StreamViewType"],
            }
        sse = props.get("SSESpecification")
        if sse and sse.get("SSEEnabled"):
            kw["SSESpecification"] = {"Enabled": True}
            if sse.get("SSEType"):
                kw["SSESpecification"]["SSEType"] = sse["SSEType"]
            if sse.get("KMSMasterKeyId"):
                kw["SSESpecification"]["KMSMasterKeyId"] = sse["KMSMasterKeyId"]
        out[lid] = kw
    return out


def table_ttls(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``{table name: TTL attribute}`` for tables with ``TimeToLiveSpecification.Enabled``."""
    ctx = _ctx(template, stack_name, parameters)
    out = {}
    for lid, res in resources_of_type(ctx.template, "AWS::DynamoDB::Table").items():
        ttl = resolve((res.get("Properties") or {}).get("TimeToLiveSpecification"), ctx)
        if ttl and ttl.get("Enabled", True) and ttl.get("AttributeName"):
            out[ctx.physical_name(lid)] = ttl["AttributeName"]
    return out


def table_names(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``{logical id: table name}``."""
    ctx = _ctx(template, stack_name, parameters)
    return {
        lid: ctx.physical_name(lid)
        for lid in resources_of_type(ctx.template, "AWS::DynamoDB::Table")
    }


def create_tables(
    dynamodb_client: Any,
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Create the template's tables (idempotent: existing ones are left alone) and their TTLs.

    Returns ``{logical id: table name}``. When ``template`` is a :class:`Context`, its
    ``attributes`` get the tables' real ``Arn`` and ``StreamArn``.
    """
    ctx = _ctx(template, stack_name, parameters)
    existing: set[str] = set()
    for page in dynamodb_client.get_paginator("list_tables").paginate():
        existing.update(page.get("TableNames", []))
    names = {}
    for lid, kw in table_definitions(ctx).items():
        name = kw["TableName"]
        if name not in existing:
            try:
                dynamodb_client.create_table(**kw)
            except dynamodb_client.exceptions.ResourceInUseException:
                pass
        names[lid] = name
    for name, attr in table_ttls(ctx).items():
        current = dynamodb_client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            dynamodb_client.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": attr},
            )
    for lid, name in names.items():
        desc = dynamodb_client.describe_table(TableName=name)["Table"]
        ctx.attributes[(lid, "Arn")] = desc["TableArn"]
        if desc.get("LatestStreamArn"):
            ctx.attributes[(lid, "StreamArn")] = desc["LatestStreamArn"]
    return names


# -------------------------------------------------------------------------------------- buckets


def bucket_names(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    ctx = _ctx(template, stack_name, parameters)
    return {lid: ctx.physical_name(lid) for lid in resources_of_type(ctx.template, "AWS::S3::Bucket")}


def create_buckets(
    s3_client: Any,
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Create the template's buckets (idempotent). Returns ``{logical id: bucket name}``."""
    ctx = _ctx(template, stack_name, parameters)
    names = bucket_names(ctx)
    region = s3_client.meta.region_name or DEFAULT_REGION
    for name in names.values():
        kw: dict[str, Any] = {"Bucket": name}
        if region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            s3_client.create_bucket(**kw)
        except (
            s3_client.exceptions.BucketAlreadyOwnedByYou,
            s3_client.exceptions.BucketAlreadyExists,
        ):
            pass
    return names


# --------------------------------------------------------------------------------------- queues


def queue_names(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``{logical id: queue name}`` for every ``AWS::SQS::Queue`` of the template."""
    ctx = _ctx(template, stack_name, parameters)
    return {lid: ctx.physical_name(lid) for lid in resources_of_type(ctx.template, "AWS::SQS::Queue")}


def create_queues(
    sqs_client: Any,
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Create the template's SQS queues (idempotent). Returns ``{logical id: queue URL}``."""
    ctx = _ctx(template, stack_name, parameters)
    urls = {}
    for lid, name in queue_names(ctx).items():
        props = resolve(resources_of_type(ctx.template, "AWS::SQS::Queue")[lid].get("Properties") or {}, ctx)
        attrs = {k: str(props[k]).lower() if isinstance(props[k], bool) else str(props[k])
                 for k in ("MessageRetentionPeriod", "VisibilityTimeout", "SqsManagedSseEnabled")
                 if k in props}
        urls[lid] = sqs_client.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    return urls


# --------------------------------------------------------------------------------------- secrets


def secret_arn(ctx: Context, logical_id: str, seen: frozenset = frozenset()) -> str:
    """A secret's local ARN (its ``Ref``): the *partial* ARN ``arn:aws:secretsmanager:<region>:
    <account>:secret:<name>`` (AWS appends ``-`` and 6 random characters; Secrets Manager, and
    moto, accept the partial form as a SecretId, and IAM policies here name the same string)."""
    return f"arn:aws:secretsmanager:{ctx.region}:{ctx.account_id}:secret:{ctx.physical_name(logical_id, seen)}"


def create_secrets(
    secretsmanager_client: Any,
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Create the template's ``AWS::SecretsManager::Secret`` resources (idempotent: an existing
    secret keeps its value): ``SecretString`` as given, or generated as ``GenerateSecretString``
    says (``GetRandomPassword`` with its options; ``SecretStringTemplate`` + ``GenerateStringKey``
    → JSON). Returns ``{logical id: ARN}`` (the local Ref)."""
    import json

    ctx = _ctx(template, stack_name, parameters)
    out = {}
    for lid, res in resources_of_type(ctx.template, "AWS::SecretsManager::Secret").items():
        props = resolve(res.get("Properties") or {}, ctx) or {}
        name = ctx.physical_name(lid)
        value = props.get("SecretString")
        if value is None:
            gen = dict(props.get("GenerateSecretString") or {})
            opts = {k: gen[k] for k in ("PasswordLength", "ExcludeCharacters", "ExcludeNumbers",
                                        "ExcludePunctuation", "ExcludeUppercase", "ExcludeLowercase",
                                        "IncludeSpace", "RequireEachIncludedType") if k in gen}
            value = secretsmanager_client.get_random_password(**opts)["RandomPassword"]
            if gen.get("SecretStringTemplate") and gen.get("GenerateStringKey"):
                doc = json.loads(gen["SecretStringTemplate"])
                doc[gen["GenerateStringKey"]] = value
                value = json.dumps(doc)
        try:
            secretsmanager_client.create_secret(Name=name, SecretString=str(value),
                                                Description=str(props.get("Description") or ""))
        except secretsmanager_client.exceptions.ResourceExistsException:
            pass
        out[lid] = secret_arn(ctx, lid)
    return out


# ------------------------------------------------------------------------------------ functions


class StreamEvent(NamedTuple):
    """A ``DynamoDB`` event source of a function (an event source mapping on AWS)."""

    table: str  # logical id of the table whose stream feeds the function
    batch_size: int
    batching_window_s: float
    starting_position: str  # TRIM_HORIZON | LATEST
    function_response_types: tuple[str, ...]
    maximum_retry_attempts: int = -1  # -1: retry until it succeeds (AWS default)
    name: str = ""  # the event's name in the template
    enabled: bool = True
    maximum_record_age_s: int = -1  # -1: records never expire (AWS default)
    bisect_on_error: bool = False  # BisectBatchOnFunctionError
    on_failure: str | None = None  # DestinationConfig.OnFailure.Destination (an SQS queue's ARN)


@dataclass
class FunctionSpec:
    logical_id: str
    code_uri: Path  # absolute
    handler: str  # e.g. "app.lambda_handler"
    environment: dict[str, str]
    http_routes: list[tuple[str, str]]  # (METHOD, path) — METHOD may be ANY
    stream_events: list[StreamEvent]
    function_name: str = ""
    memory_size: int = 128
    timeout: int = 3
    runtime: str = "python3.11"


def _merge_globals(glob: Mapping, props: Mapping) -> dict:
    merged = copy.deepcopy(dict(glob))
    for k, v in props.items():
        if k == "Environment" and isinstance(v, Mapping) and isinstance(merged.get(k), Mapping):
            variables = dict((merged[k] or {}).get("Variables") or {})
            variables.update((v or {}).get("Variables") or {})
            merged[k] = {"Variables": variables}
        else:
            merged[k] = copy.deepcopy(v)
    return merged


def _stream_table(stream: Any, ctx: Context) -> str | None:
    """The logical id of the table behind a ``Stream:`` value (``!GetAtt T.StreamArn``)."""
    if isinstance(stream, dict):
        if "Fn::GetAtt" in stream:
            arg = stream["Fn::GetAtt"]
            if isinstance(arg, str):
                arg = arg.split(".", 1)
            return arg[0]
        if "Ref" in stream:
            return stream["Ref"]
        if "Fn::Sub" in stream and isinstance(stream["Fn::Sub"], str):
            m = re.search(r"\$\{(\w+)\.StreamArn\}", stream["Fn::Sub"])
            if m:
                return m.group(1)
    if isinstance(stream, str):
        for lid in resources_of_type(ctx.template, "AWS::DynamoDB::Table"):
            if f"table/{ctx.physical_name(lid)}/" in stream:
                return lid
    return None


def functions(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> list[FunctionSpec]:
    """The template's ``AWS::Serverless::Function`` resources, Globals merged and resolved."""
    ctx = _ctx(template, stack_name, parameters)
    tpl = ctx.template
    base_dir = tpl.base_dir if isinstance(tpl, Template) else REPO_ROOT
    glob = ((tpl.get("Globals") or {}).get("Function")) or {}
    specs = []
    for lid, res in resources_of_type(tpl, "AWS::Serverless::Function").items():
        raw = _merge_globals(glob, res.get("Properties") or {})
        env = resolve((raw.get("Environment") or {}).get("Variables") or {}, ctx)
        routes: list[tuple[str, str]] = []
        streams: list[StreamEvent] = []
        for ev_name, ev in (raw.get("Events") or {}).items():
            etype = (ev or {}).get("Type")
            ep = (ev or {}).get("Properties") or {}
            if etype in ("HttpApi", "Api"):
                path = resolve(ep.get("Path"), ctx)
                method = str(resolve(ep.get("Method", "ANY"), ctx) or "ANY").upper()
                if method == "X-AMAZON-APIGATEWAY-ANY-METHOD":
                    method = "ANY"
                if path:
                    routes.append((method, path))
            elif etype == "DynamoDB":
                table = _stream_table(ep.get("Stream"), ctx)
                if table is None:
                    log.warning("%s.%s: cannot tell which table feeds it; skipped", lid, ev_name)
                    continue
                frt = resolve(ep.get("FunctionResponseTypes") or [], ctx)
                streams.append(
                    StreamEvent(
                        table=table,
                        batch_size=int(resolve(ep.get("BatchSize", 100), ctx)),
                        batching_window_s=float(
                            resolve(ep.get("MaximumBatchingWindowInSeconds", 0), ctx)
                        ),
                        starting_position=str(resolve(ep.get("StartingPosition", "LATEST"), ctx)),
                        function_response_types=tuple(frt),
                        maximum_retry_attempts=int(resolve(ep.get("MaximumRetryAttempts", -1), ctx)),
                        name=ev_name,
                        enabled=bool(resolve(ep.get("Enabled", True), ctx)),
                        maximum_record_age_s=int(resolve(ep.get("MaximumRecordAgeInSeconds", -1), ctx)),
                        bisect_on_error=bool(resolve(ep.get("BisectBatchOnFunctionError", False), ctx)),
                        on_failure=(resolve(((ep.get("DestinationConfig") or {}).get("OnFailure") or {})
                                            .get("Destination"), ctx) or None),
                    )
                )
        code_uri = resolve(raw.get("CodeUri", "."), ctx)
        if isinstance(code_uri, dict):  # S3 location: nothing to run locally
            log.warning("%s: CodeUri is not a local directory", lid)
            code_uri = "."
        specs.append(
            FunctionSpec(
                logical_id=lid,
                code_uri=(base_dir / str(code_uri)).resolve(),
                handler=str(resolve(raw.get("Handler", "app.lambda_handler"), ctx)),
                environment={k: "" if v is None else str(v) for k, v in env.items()},
                http_routes=routes,
                stream_events=streams,
                function_name=ctx.physical_name(lid),
                memory_size=int(resolve(raw.get("MemorySize", 128), ctx)),
                timeout=int(resolve(raw.get("Timeout", 3), ctx)),
                runtime=str(resolve(raw.get("Runtime", "python3.11"), ctx)),
            )
        )
    return specs


def layer_dirs(template: Mapping | None = None) -> list[Path]:
    """Local directories of the template's layers (what goes on ``sys.path`` locally)."""
    tpl = load_template(template)
    base_dir = tpl.base_dir
    out = []
    for res in resources_of_type(
        tpl, "AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion"
    ).values():
        props = res.get("Properties") or {}
        uri = props.get("ContentUri") or (props.get("Content") or {})
        if isinstance(uri, str):
            out.append((base_dir / uri).resolve())
    return out


def environment(
    template: Mapping | Context | None = None,
    stack_name: str = LOCAL_STACK,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The union of every function's resolved environment (Globals included) for the local stack.

    ``LAKEQ_ADMIN_KEY_SHA256`` is the sha-256 hex of ``$LAKEQ_ADMIN_KEY`` (default
    ``local-admin-key``) unless ``parameters`` give ``AdminKeySha256``.
    """
    ctx = _ctx(template, stack_name, parameters)
    env: dict[str, str] = {}
    glob = ((ctx.template.get("Globals") or {}).get("Function")) or {}
    gvars = resolve((glob.get("Environment") or {}).get("Variables") or {}, ctx)
    env.update({k: "" if v is None else str(v) for k, v in gvars.items()})
    for spec in functions(ctx):
        env.update(spec.environment)
    return env


def iter_routes(specs: Iterable[FunctionSpec]) -> Iterable[tuple[str, str, FunctionSpec]]:
    for spec in specs:
        for method, path in spec.http_routes:
            yield method, path, spec
