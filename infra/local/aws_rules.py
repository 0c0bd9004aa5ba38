"""What AWS enforces and moto does not, for the local stack and the tests: an interceptor hook.

:class:`AwsRules` is a hook for :mod:`infra.local.interceptor` (``before(call)`` / ``after(call,
response)``) that makes every DynamoDB, DynamoDB Streams, S3 and Secrets Manager call go through:

1. **IAM** — a call made as a function (``call.function`` set, see ``interceptor.acting_as``) is
   authorised against that function's execution role *as SAM deploys it*: ``template.yaml`` is
   run through samtranslator itself (:func:`roles_from_template`: policy templates such as
   ``DynamoDBReadPolicy`` expanded from samtranslator's ``policy_templates.json``, inline
   ``Statement`` policies, ``Role:`` / ``AWS::IAM::Policy`` resources, the managed policies SAM
   adds), intrinsics resolved with :mod:`infra.local.template` for the local stack
   (``lakeq-local``, account 123456789012, us-east-1). The operation is mapped to IAM actions and
   resource ARNs the way AWS authorises it (:func:`required_permissions`: each item of a
   TransactWriteItems on its own table, BatchGet/BatchWrite per table, Query/Scan on an index →
   the index ARN, S3 object ARNs, ListObjectsV2 → ``s3:ListBucket`` on the bucket with the
   ``s3:prefix`` condition key, Secrets Manager calls on the secret's ARN, API Gateway management
   calls → ``execute-api:ManageConnections`` on ``<api>/<stage>/<VERB>/@connections/<id>``, Glue
   job-run calls → ``glue:<Operation>`` on the job's ARN, CloudWatch's metric calls →
   ``cloudwatch:<Operation>`` on ``*``: they have no resource-level permissions). Wildcards in
   ``Action`` / ``Resource``, ``NotAction`` / ``NotResource``, the ``String*`` condition
   operators; an explicit ``Deny`` wins. A denied call raises botocore's ``ClientError`` —
   ``AccessDeniedException`` (S3: ``AccessDenied``, 403) with AWS's message — before anything
   reaches the store. Calls made as nobody (test set-up, the stack's own plumbing) are not
   IAM-checked.
2. **DynamoDB limits** (``ValidationException`` with DynamoDB's messages), for every call: the
   attribute values' wire types (``{"N": 5}`` is a ``SerializationException``: numbers travel as
   strings; pynamodb's client does not validate what its low-level calls are given); 400 KB
   items (PutItem, BatchWriteItem, TransactWriteItems puts; for UpdateItem and transaction updates
   that set 1 KB or more, the *resulting* item, computed by applying the update expression to the
   stored item with moto's own update-expression engine), sizes by DynamoDB's rules
   (:func:`item_size`); TransactWriteItems / TransactGetItems ≤ 100 items and ≤ 4 MB; BatchWriteItem
   ≤ 25 requests; BatchGetItem ≤ 100 keys, and a response over 16 MB is cut, the rest returned as
   ``UnprocessedKeys``; a Query/Scan page is cut at 1 MB of items read, with ``LastEvaluatedKey``
   set as DynamoDB does (callers must paginate).
3. **Lambda / API Gateway payloads** — plain functions used by the local gateway, the in-process
   test client (``tests/handlers.py``) and the streams pump: :func:`request_too_large` (HTTP API
   body 10 MB; Lambda's synchronous invocation request 6 MB), :func:`response_too_large` (6 MB),
   :data:`GATEWAY_INTERNAL_ERROR` (what API Gateway answers when the integration fails).

Finding missing permissions: ``LAKEQ_IAM_AUDIT=<file>`` (tests) lets denied calls through and
appends ``function action resource operation`` lines to the file; ``LAKEQ_IAM_RECORD=<file>``
appends every authorisation made (what each function really uses, for least privilege).

Wiring: ``tests/conftest.py``'s ``aws`` fixture activates :func:`for_tests`; the local stack
(``python -m infra.local``) installs the hook in its own process and hands each worker process its
function's logical id and role (:meth:`AwsRules.worker_env` → :func:`install_from_env`).
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import logging
import os
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Mapping

from botocore.exceptions import ClientError

from . import template as tpl_mod
from .interceptor import Call

log = logging.getLogger("lakeq.local.aws_rules")

# ------------------------------------------------------------------------------------ the limits

ITEM_LIMIT = 400 * 1024  # DynamoDB's 400 KB item
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 4 * 1024 * 1024
BATCH_WRITE_ITEMS = 25
BATCH_GET_KEYS = 100
BATCH_GET_RESPONSE = 16 * 1024 * 1024
PAGE_BYTES = 1024 * 1024  # Query / Scan: 1 MB of items read per page
SMALL_UPDATE = 1024  # an UpdateItem whose values total less is not size-checked (see updated_item_size)
LAMBDA_REQUEST_LIMIT = 6 * 1024 * 1024  # synchronous Invoke request: 6,291,456 bytes
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024 + 100  # Lambda reports 6,291,556 for responses
HTTP_API_BODY_LIMIT = 10 * 1024 * 1024  # API Gateway (HTTP API) request body

# what API Gateway answers itself
GATEWAY_INTERNAL_ERROR = {"message": "Internal Server Error"}  # 500: the integration failed
GATEWAY_TOO_LARGE = {"message": "Request Entity Too Large"}  # 413

ENV_FUNCTION = "LAKEQ_LOCAL_FUNCTION"  # a worker's logical id
ENV_RULES = "LAKEQ_LOCAL_AWS_RULES"  # a worker's rules (JSON: role, statements, tables)


def _validation(operation: str, message: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": "ValidationException", "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": 400}},
        operation,
    )


def _serialization(operation: str, message: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": "SerializationException", "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": 400}},
        operation,
    )


def wire_type_error(value: Any) -> str | None:
    """DynamoDB's message for the first attribute value in ``value`` (a request's parameters, walked
    whole) whose wire type is wrong, or None: a number (``N``) or string (``S``) must be sent as a
    JSON string, a number or string set (``NS`` / ``SS``) as a list of them. boto3 validates this
    before sending; pynamodb's client does not (``parameter_validation=False``), and moto accepts
    ``{"N": 5}``, which DynamoDB refuses."""
    if isinstance(value, dict):
        if len(value) == 1:
            (t, v), = value.items()
            if t in ("N", "S") and not isinstance(v, str):
                return f"{'NUMBER' if t == 'N' else 'STRING'}_VALUE cannot be converted to String"
            if t in ("NS", "SS") and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                return f"{'NUMBER' if t == 'NS' else 'STRING'}_SET_VALUE cannot be converted to String"
        for v in value.values():
            err = wire_type_error(v)
            if err:
                return err
    elif isinstance(value, list):
        for v in value:
            err = wire_type_error(v)
            if err:
                return err
    return None


# ------------------------------------------------------------------------------- DynamoDB sizes


def _b64len(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    s = str(value)
    try:
        return len(base64.b64decode(s, validate=False))
    except Exception:  # noqa: BLE001
        return len(s.encode("utf-8"))


def number_size(value: Any) -> int:
    """DynamoDB's size of a number: 1 byte per 2 significant digits (rounded up) + 1, + 1 when
    negative (leading and trailing zeros do not count)."""
    s = str(value).strip()
    digits = s[1:] if s[:1] == "-" else s
    if digits.isascii() and digits.isdigit():  # an integer's text (most numbers): what Decimal would give
        sig = digits.strip("0")
        return (len(sig) + 1) // 2 + 1 + (s[:1] == "-") if sig else 1
    try:
        d = Decimal(s)
    except Exception:  # noqa: BLE001
        return len(s.encode("utf-8"))
    if d == 0:
        return 1
    digits = d.as_tuple().digits
    sig = "".join(map(str, digits)).strip("0") or "0"
    size = (len(sig) + 1) // 2 + 1
    return size + (1 if d < 0 else 0)


def value_size(av: Any) -> int:
    """Size of one AttributeValue (``{"S": …}``…), or of a plain Python value (resource style)."""
    # ``type(av) is dict`` first: ``isinstance`` against typing's ``Mapping`` alias is a slow check,
    # and this runs for every attribute of every item the store reads or writes (it was ~2 % of the
    # queue model's CPU; the same answer for a dict)
    if (type(av) is dict or isinstance(av, Mapping)) and len(av) == 1:
        (t, v), = av.items()
        if t == "S":
            return len(str(v).encode("utf-8"))
        if t == "N":
            return number_size(v)
        if t == "B":
            return _b64len(v)
        if t in ("BOOL", "NULL"):
            return 1
        if t == "SS":
            return sum(len(str(x).encode("utf-8")) for x in v)
        if t == "NS":
            return sum(number_size(x) for x in v)
        if t == "BS":
            return sum(_b64len(x) for x in v)
        if t == "L":
            return 3 + sum(value_size(x) + 1 for x in v)
        if t == "M":
            return 3 + sum(len(str(k).encode("utf-8")) + value_size(x) + 1 for k, x in v.items())
    # plain Python values (boto3's resource layer)
    if isinstance(av, str):
        return len(av.encode("utf-8"))
    if isinstance(av, bool) or av is None:
        return 1
    if isinstance(av, (int, float, Decimal)):
        return number_size(av)
    if isinstance(av, (bytes, bytearray)):
        return len(av)
    if isinstance(av, (set, frozenset)):
        return sum(value_size(x) for x in av)
    if isinstance(av, list):
        return 3 + sum(value_size(x) + 1 for x in av)
    if isinstance(av, Mapping):
        return 3 + sum(len(str(k).encode("utf-8")) + value_size(x) + 1 for k, x in av.items())
    return len(str(av).encode("utf-8"))


def item_size(item: Mapping[str, Any] | None) -> int:
    """DynamoDB's item size: for each attribute, its name's UTF-8 bytes plus its value's size."""
    if not item:
        return 0
    return sum(len(str(k).encode("utf-8")) + value_size(v) for k, v in item.items())


# --------------------------------------------------------------------------------------- roles


@dataclass
class Role:
    """A function's execution role: the statements of all its policies."""

    function: str  # logical id
    role_name: str
    session_name: str  # the function's name (Lambda's role session name)
    account_id: str
    statements: list[dict] = field(default_factory=list)

    @property
    def principal(self) -> str:
        return f"arn:aws:sts::{self.account_id}:assumed-role/{self.role_name}/{self.session_name}"

    def to_json(self) -> dict:
        return {"function": self.function, "role_name": self.role_name,
                "session_name": self.session_name, "account_id": self.account_id,
                "statements": self.statements}

    @classmethod
    def from_json(cls, d: Mapping) -> "Role":
        return cls(d["function"], d["role_name"], d["session_name"], d["account_id"],
                   list(d.get("statements") or []))


# The AWS managed policies SAM attaches to function roles (their documents are not in
# samtranslator). Any other managed policy grants nothing here (a warning says so).
MANAGED_POLICIES: dict[str, list[dict]] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": [
        {"Effect": "Allow", "Action": ["logs:CreateLogGroup", "logs:CreateLogStream",
                                       "logs:PutLogEvents"], "Resource": "*"}],
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": [
        {"Effect": "Allow", "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords",
                                       "xray:GetSamplingRules", "xray:GetSamplingTargets",
                                       "xray:GetSamplingStatisticSummaries"], "Resource": "*"}],
    "arn:aws:iam::aws:policy/service-role/AWSLambdaDynamoDBExecutionRole": [
        {"Effect": "Allow", "Action": ["dynamodb:DescribeStream", "dynamodb:GetRecords",
                                       "dynamodb:GetShardIterator", "dynamodb:ListStreams",
                                       "logs:CreateLogGroup", "logs:CreateLogStream",
                                       "logs:PutLogEvents"], "Resource": "*"}],
    "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole": [
        {"Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage",
                                       "sqs:GetQueueAttributes", "logs:CreateLogGroup",
                                       "logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": "*"}],
}

_translated: dict[str, dict] = {}
_translate_lock = threading.Lock()


def _translation_cache_dir() -> str | None:
    """Where translations are kept between processes: ``LAKEQ_SAM_CACHE`` (``0``: nowhere), else
    ``$XDG_CACHE_HOME/lakeq/sam`` (``~/.cache/lakeq/sam``)."""
    where = os.environ.get("LAKEQ_SAM_CACHE")
    if where is not None:
        return None if where in ("", "0") else where
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if home != "~" else None)
    return os.path.join(base, "lakeq", "sam") if base else None


def _read_translation(path: str) -> dict | None:
    """The translation in ``path`` if this user alone could have written it (the roles it holds
    decide every IAM check): a file owned by us, in a directory owned by us, neither writable by
    group or others; anything else is ignored (translated again)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for st in (os.fstat(fh.fileno()), os.stat(os.path.dirname(path))):
                if st.st_uid != os.getuid() or st.st_mode & 0o022:
                    return None
            out = json.load(fh)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def _write_translation(path: str, out: Mapping) -> None:
    """Atomically (a temporary file renamed over the name), so a reader never sees half a file;
    a cache that cannot be written is only slower."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(out, fh, default=str)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def sam_translate(template: Mapping, parameters: Mapping[str, Any] | None = None) -> dict:
    """``template`` run through samtranslator (what CloudFormation's SAM transform does), cached
    by content in the process and on disk (:func:`_translation_cache_dir`; the key is the
    template's and the parameters' text and samtranslator's version: ~7 s a process saved for
    every test worker and local stack after the first). Local ``CodeUri`` / ``ContentUri``
    directories are replaced by placeholder S3 locations first (as ``sam validate`` does: the
    translator only accepts S3 URIs)."""
    import samtranslator

    text = json.dumps(template, sort_keys=True, default=str)
    params = {k: v for k, v in (parameters or {}).items()}
    region = os.environ.get("AWS_DEFAULT_REGION") or tpl_mod.DEFAULT_REGION  # (the ARNs' partition)
    key = hashlib.sha256("\0".join((text, json.dumps(params, sort_keys=True, default=str), region,
                                    samtranslator.__version__, _translator_code())).encode()).hexdigest()
    with _translate_lock:
        if key in _translated:
            return copy.deepcopy(_translated[key])
    cache_dir = _translation_cache_dir()
    path = os.path.join(cache_dir, f"{key}.json") if cache_dir else None
    out = _read_translation(path) if path else None
    if out is None:
        out = _translate(text, params)
        # what the cache would give back (JSON), so a first run and a cached one read the same
        out = json.loads(json.dumps(out, default=str))
        if path:
            _write_translation(path, out)
    with _translate_lock:
        _translated[key] = out
    return copy.deepcopy(out)


@functools.lru_cache(maxsize=1)
def _translator_code() -> str:
    """lakeq's part of a translation (:func:`_translate`'s text), part of the disk cache's key: an
    edited ``_translate`` does not read what the old one made."""
    import inspect

    try:
        return hashlib.sha256(inspect.getsource(_TRANSLATE).encode()).hexdigest()
    except (OSError, TypeError):
        return repr(_TRANSLATE.__code__.co_code)


def _translate(text: str, params: dict) -> dict:
    from samtranslator.internal.managed_policies import get_bundled_managed_policy_map
    from samtranslator.translator.transform import transform

    t = json.loads(text)
    for res in (t.get("Resources") or {}).values():
        props = (res or {}).get("Properties") or {}
        if isinstance(props.get("CodeUri"), str):
            props["CodeUri"] = "s3://lakeq-local-code/code.zip"
        if isinstance(props.get("ContentUri"), str):
            props["ContentUri"] = "s3://lakeq-local-code/layer.zip"
    glob = ((t.get("Globals") or {}).get("Function")) or {}
    if isinstance(glob.get("CodeUri"), str):
        glob["CodeUri"] = "s3://lakeq-local-code/code.zip"

    class _Loader:
        def load(self) -> dict:
            return get_bundled_managed_policy_map("aws") or {}

    # the translator reads the region from boto3's default session when it builds ARNs
    os.environ.setdefault("AWS_DEFAULT_REGION", tpl_mod.DEFAULT_REGION)
    return transform(t, dict(params), _Loader())


_TRANSLATE = _translate  # (what _translator_code reads: tests wrap the module's _translate)


def roles_from_template(ctx: tpl_mod.Context) -> dict[str, Role]:
    """``{function logical id: Role}`` for every ``AWS::Serverless::Function`` of ``ctx``'s
    template, from samtranslator's output, intrinsics resolved with ``ctx``."""
    cfn = sam_translate(ctx.template, ctx.parameters)
    resources = cfn.get("Resources") or {}
    rctx = tpl_mod.Context(template=cfn, stack_name=ctx.stack_name, parameters=dict(ctx.parameters),
                           region=ctx.region, account_id=ctx.account_id,
                           attributes=ctx.attributes)
    # inline role policies and AWS::IAM::Policy / ManagedPolicy resources attached to roles
    attached: dict[str, list[dict]] = {}
    for lid, res in resources.items():
        if res.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            props = res.get("Properties") or {}
            doc = props.get("PolicyDocument") or {}
            for r in props.get("Roles") or []:
                if isinstance(r, Mapping) and "Ref" in r:
                    attached.setdefault(r["Ref"], []).append(doc)
    roles: dict[str, Role] = {}
    sam_functions = tpl_mod.resources_of_type(ctx.template, "AWS::Serverless::Function")
    for fn_lid in sam_functions:
        fn = resources.get(fn_lid) or {}
        role_ref = (fn.get("Properties") or {}).get("Role")
        role_lid = None
        if isinstance(role_ref, Mapping) and "Fn::GetAtt" in role_ref:
            arg = role_ref["Fn::GetAtt"]
            role_lid = (arg.split(".", 1) if isinstance(arg, str) else arg)[0]
        elif isinstance(role_ref, Mapping) and "Ref" in role_ref:
            role_lid = role_ref["Ref"]
        statements: list[dict] = []
        role_name = f"{ctx.stack_name}-{fn_lid}Role"
        if role_lid and role_lid in resources:
            role_name = f"{ctx.stack_name}-{role_lid}"
            props = (resources[role_lid].get("Properties") or {})
            if props.get("RoleName"):
                role_name = str(tpl_mod.resolve(props["RoleName"], rctx))
            docs = [p.get("PolicyDocument") or {} for p in props.get("Policies") or []]
            docs += attached.get(role_lid, [])
            for doc in docs:
                doc = tpl_mod.resolve(doc, rctx) or {}
                st = doc.get("Statement") or []
                statements.extend([st] if isinstance(st, Mapping) else st)
            for arn in tpl_mod.resolve(props.get("ManagedPolicyArns") or [], rctx):
                if arn in MANAGED_POLICIES:
                    statements.extend(copy.deepcopy(MANAGED_POLICIES[arn]))
                else:
                    log.warning("%s: managed policy %s is not known locally; it grants nothing here",
                                fn_lid, arn)
        else:
            log.warning("%s: its role (%r) is not in the template; it is allowed nothing here",
                        fn_lid, role_ref)
        roles[fn_lid] = Role(fn_lid, role_name, ctx.physical_name(fn_lid), ctx.account_id,
                             statements)
    return roles


# ------------------------------------------------------------------------------ authorization


@dataclass(frozen=True)
class Permission:
    action: str  # e.g. dynamodb:Query
    resource: str  # ARN
    conditions: tuple[tuple[str, str], ...] = ()  # context keys, e.g. (("s3:prefix", "raw/"),)


def _as_list(v: Any) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


@functools.lru_cache(maxsize=4096)
def _pattern(pattern: str) -> "re.Pattern[str]":
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def _wild(pattern: str, value: str, case: bool) -> bool:
    """IAM's wildcard match (``*`` any run of characters, ``/`` and ``:`` included; ``?`` one)."""
    if not case:
        pattern, value = pattern.lower(), value.lower()
    if "*" not in pattern and "?" not in pattern:
        return pattern == value
    return _pattern(pattern).fullmatch(value) is not None


def _condition_ok(cond: Mapping | None, context: Mapping[str, str]) -> bool:
    """IAM condition block against the request's context keys (String* operators)."""
    if not cond:
        return True
    lowered = {k.lower(): v for k, v in context.items()}
    for op, clauses in cond.items():
        base = op[:-8] if op.endswith("IfExists") else op
        if_exists = op.endswith("IfExists")
        if base.startswith(("ForAnyValue:", "ForAllValues:")):
            base = base.split(":", 1)[1]
        for key, expected in (clauses or {}).items():
            present = key.lower() in lowered
            value = lowered.get(key.lower())
            values = [str(x) for x in _as_list(expected)]
            if not present:
                if if_exists or base.startswith(("StringNot", "ArnNot")):
                    continue
                if base == "Null":
                    if not any(v.lower() == "true" for v in values):
                        return False
                    continue
                return False
            if base == "Null":
                if any(v.lower() == "true" for v in values):
                    return False
                continue
            if base in ("StringEquals", "ArnEquals"):
                ok = value in values
            elif base == "StringEqualsIgnoreCase":
                ok = value.lower() in [v.lower() for v in values]
            elif base in ("StringLike", "ArnLike"):
                ok = any(_wild(v, value, True) for v in values)
            elif base in ("StringNotEquals", "ArnNotEquals"):
                ok = value not in values
            elif base == "StringNotEqualsIgnoreCase":
                ok = value.lower() not in [v.lower() for v in values]
            elif base in ("StringNotLike", "ArnNotLike"):
                ok = not any(_wild(v, value, True) for v in values)
            elif base == "Bool":
                ok = value.lower() in [v.lower() for v in values]
            else:
                log.warning("condition operator %s is not evaluated locally; treated as not met", op)
                ok = False
            if not ok:
                return False
    return True


def _statement_matches(st: Mapping, perm: Permission) -> bool:
    if "Action" in st:
        if not any(_wild(str(a), perm.action, False) for a in _as_list(st["Action"])):
            return False
    elif "NotAction" in st:
        if any(_wild(str(a), perm.action, False) for a in _as_list(st["NotAction"])):
            return False
    else:
        return False
    if "Resource" in st:
        if not any(_wild(str(r), perm.resource, True) for r in _as_list(st["Resource"])):
            return False
    elif "NotResource" in st:
        if any(_wild(str(r), perm.resource, True) for r in _as_list(st["NotResource"])):
            return False
    else:
        return False
    return _condition_ok(st.get("Condition"), dict(perm.conditions))


def evaluate(statements: Iterable[Mapping], perm: Permission) -> str:
    """``"allow"``, ``"explicit_deny"`` or ``"implicit_deny"`` (an explicit Deny wins)."""
    allowed = False
    for st in statements:
        if not _statement_matches(st, perm):
            continue
        if str(st.get("Effect", "")).lower() == "deny":
            return "explicit_deny"
        if str(st.get("Effect", "")).lower() == "allow":
            allowed = True
    return "allow" if allowed else "implicit_deny"


def access_denied(service: str, operation: str, role: Role, perm: Permission, decision: str) -> ClientError:
    why = ("with an explicit deny in an identity-based policy" if decision == "explicit_deny"
           else f"because no identity-based policy allows the {perm.action} action")
    if service == "s3":
        msg = (f"User: {role.principal} is not authorized to perform: {perm.action} on resource: "
               f"\"{perm.resource}\" {why}")
        return ClientError({"Error": {"Code": "AccessDenied", "Message": msg},
                            "ResponseMetadata": {"HTTPStatusCode": 403}}, operation)
    msg = f"User: {role.principal} is not authorized to perform: {perm.action} on resource: {perm.resource} {why}"
    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": msg},
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


_TRANSACT_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                     "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}

# S3 operation → (IAM action, "object" | "bucket" | "*")
_S3 = {
    "PutObject": ("s3:PutObject", "object"), "GetObject": ("s3:GetObject", "object"),
    "HeadObject": ("s3:GetObject", "object"), "DeleteObject": ("s3:DeleteObject", "object"),
    "CreateMultipartUpload": ("s3:PutObject", "object"), "UploadPart": ("s3:PutObject", "object"),
    "CompleteMultipartUpload": ("s3:PutObject", "object"),
    "AbortMultipartUpload": ("s3:AbortMultipartUpload", "object"),
    "ListParts": ("s3:ListMultipartUploadParts", "object"),
    "GetObjectTagging": ("s3:GetObjectTagging", "object"),
    "PutObjectTagging": ("s3:PutObjectTagging", "object"),
    "GetObjectAcl": ("s3:GetObjectAcl", "object"), "PutObjectAcl": ("s3:PutObjectAcl", "object"),
    "ListObjects": ("s3:ListBucket", "bucket"), "ListObjectsV2": ("s3:ListBucket", "bucket"),
    "HeadBucket": ("s3:ListBucket", "bucket"),
    "ListObjectVersions": ("s3:ListBucketVersions", "bucket"),
    "ListMultipartUploads": ("s3:ListBucketMultipartUploads", "bucket"),
    "GetBucketLocation": ("s3:GetBucketLocation", "bucket"),
    "ListBuckets": ("s3:ListAllMyBuckets", "*"),
}


class Arns:
    def __init__(self, region: str, account_id: str):
        self.region, self.account_id = region, account_id

    def table(self, name: str) -> str:
        if str(name).startswith("arn:"):
            return str(name)
        return f"arn:aws:dynamodb:{self.region}:{self.account_id}:table/{name}"

    def index(self, table: str, index: str) -> str:
        return f"{self.table(table)}/index/{index}"


def required_permissions(call: Call, arns: Arns) -> list[Permission]:
    """The IAM (action, resource, context) checks AWS makes for ``call``."""
    op, p = call.operation, call.params or {}
    if call.service == "dynamodb":
        if op == "TransactWriteItems" or op == "TransactGetItems":
            out = []
            for item in p.get("TransactItems") or []:
                for kind, body in item.items():
                    out.append(Permission(f"dynamodb:{_TRANSACT_ACTIONS.get(kind, kind)}",
                                          arns.table(body.get("TableName", ""))))
            return out
        if op in ("BatchGetItem", "BatchWriteItem"):
            return [Permission(f"dynamodb:{op}", arns.table(t)) for t in (p.get("RequestItems") or {})]
        if op in ("Query", "Scan") and p.get("IndexName"):
            return [Permission(f"dynamodb:{op}", arns.index(p["TableName"], p["IndexName"]))]
        if op in ("ListTables", "DescribeLimits", "DescribeEndpoints"):
            return [Permission(f"dynamodb:{op}", "*")]
        if "TableName" in p:
            return [Permission(f"dynamodb:{op}", arns.table(p["TableName"]))]
        if "ResourceArn" in p:
            return [Permission(f"dynamodb:{op}", str(p["ResourceArn"]))]
        return [Permission(f"dynamodb:{op}", "*")]
    if call.service == "dynamodbstreams":
        if op == "ListStreams":
            return [Permission("dynamodb:ListStreams", "*")]
        if op == "GetRecords":
            # the iterator names its stream; moto's iterators are opaque: the table's streams
            return [Permission("dynamodb:GetRecords", _iterator_stream(p.get("ShardIterator", ""), arns))]
        return [Permission(f"dynamodb:{op}", str(p.get("StreamArn", "*")))]
    if call.service == "s3":
        bucket = p.get("Bucket", "")
        action, kind = _S3.get(op, (f"s3:{op}", "bucket"))
        if op == "DeleteObjects":
            return [Permission("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{o.get('Key', '')}")
                    for o in (p.get("Delete") or {}).get("Objects") or []]
        if op == "CopyObject":
            src = p.get("CopySource")
            if isinstance(src, Mapping):
                src = f"{src.get('Bucket')}/{src.get('Key')}"
            src = str(src or "").lstrip("/").split("?", 1)[0]
            return [Permission("s3:GetObject", f"arn:aws:s3:::{src}"),
                    Permission("s3:PutObject", f"arn:aws:s3:::{bucket}/{p.get('Key', '')}")]
        if kind == "object":
            return [Permission(action, f"arn:aws:s3:::{bucket}/{p.get('Key', '')}")]
        if kind == "*":
            return [Permission(action, "*")]
        ctx: list[tuple[str, str]] = []
        if op in ("ListObjects", "ListObjectsV2", "ListObjectVersions"):
            if "Prefix" in p:
                ctx.append(("s3:prefix", str(p["Prefix"])))
            if "Delimiter" in p:
                ctx.append(("s3:delimiter", str(p["Delimiter"])))
            if "MaxKeys" in p:
                ctx.append(("s3:max-keys", str(p["MaxKeys"])))
        return [Permission(action, f"arn:aws:s3:::{bucket}", tuple(ctx))]
    if call.service == "apigatewaymanagementapi":
        # execute-api:ManageConnections on arn:aws:execute-api:<region>:<account>:<api>/<stage>/<VERB>/@connections/<id>
        # (the endpoint names the API and the stage: https://<api>.execute-api.<region>.amazonaws.com/<stage>;
        # the local gateway's http://127.0.0.1:<port>/<stage> is the local API)
        from urllib.parse import urlsplit

        u = urlsplit(call.endpoint or "")
        host = u.hostname or ""
        api = host.split(".", 1)[0] if ".execute-api." in host else tpl_mod.LOCAL_API_ID
        stage = u.path.strip("/").split("/", 1)[0] or "$default"
        verb = {"PostToConnection": "POST", "GetConnection": "GET", "DeleteConnection": "DELETE"}.get(op, op)
        return [Permission("execute-api:ManageConnections",
                           f"arn:aws:execute-api:{arns.region}:{arns.account_id}:{api}/{stage}/{verb}"
                           f"/@connections/{p.get('ConnectionId', '')}")]
    if call.service == "secretsmanager":
        # a secret's ARN (a name is turned into the partial ARN the local stack's Ref gives)
        sid = str(p.get("SecretId") or p.get("Name") or "")
        if not sid:
            return [Permission(f"secretsmanager:{op}", "*")]
        if not sid.startswith("arn:"):
            sid = f"arn:aws:secretsmanager:{arns.region}:{arns.account_id}:secret:{sid}"
        return [Permission(f"secretsmanager:{op}", sid)]
    if call.service == "glue":
        # job-run calls on the job's ARN (arn:aws:glue:<region>:<account>:job/<name>)
        job = p.get("JobName")
        res = f"arn:aws:glue:{arns.region}:{arns.account_id}:job/{job}" if job else "*"
        return [Permission(f"glue:{op}", res)]
    if call.service == "cloudwatch":
        # CloudWatch's metric calls (GetMetricData, PutMetricData…) have no resource-level permissions
        return [Permission(f"cloudwatch:{op}", "*")]
    return []


def _iterator_stream(iterator: str, arns: Arns) -> str:
    m = re.search(r"(arn:aws:dynamodb:[^|\s\"]+?/stream/[^|\s\"]+)", str(iterator))
    return m.group(1) if m else "*"


# ------------------------------------------------------------------------------------ the hook


@dataclass
class TableKeys:
    key: list[str]  # table key attribute names (hash, range)
    indexes: dict[str, list[str]]  # index name → its key attribute names


def table_keys(ctx: tpl_mod.Context) -> dict[str, TableKeys]:
    out = {}
    for kw in tpl_mod.table_definitions(ctx).values():
        key = [k["AttributeName"] for k in kw["KeySchema"]]
        idx = {}
        for i in (kw.get("GlobalSecondaryIndexes") or []) + (kw.get("LocalSecondaryIndexes") or []):
            idx[i["IndexName"]] = [k["AttributeName"] for k in i["KeySchema"]]
        out[kw["TableName"]] = TableKeys(key, idx)
    return out


class AwsRules:
    """The interceptor hook (see the module's docstring).

    ``roles``: ``{function logical id: Role}`` (IAM for calls made as those functions; a call made
    as a function without a role is denied everything). ``tables``: key schemas by table name (for
    ``LastEvaluatedKey`` / ``UnprocessedKeys``). ``iam`` / ``limits`` switch the two parts.
    """

    def __init__(self, roles: Mapping[str, Role], tables: Mapping[str, TableKeys], *,
                 region: str = tpl_mod.DEFAULT_REGION, account_id: str = tpl_mod.DEFAULT_ACCOUNT,
                 iam: bool = True, limits: bool = True, audit_file: str | None = None):
        self.roles = dict(roles)
        # audit mode ($LAKEQ_IAM_AUDIT in the tests): a denied call is appended to this file
        # ("function action resource") and let through, to list every missing permission at once
        self.audit_file = audit_file
        self.record_file = os.environ.get("LAKEQ_IAM_RECORD") or None
        self.tables = dict(tables)
        self.arns = Arns(region, account_id)
        self.region = region
        self.iam = iam
        self.limits = limits
        self.denied: deque[tuple[str, Permission]] = deque(maxlen=1000)  # (function, permission): the latest
        self._client = None
        self._client_lock = threading.Lock()
        # decisions already evaluated, per statement list and permission (:meth:`_decision`)
        self._decisions: dict[tuple[int, Permission], tuple[list, list, str]] = {}

    # ----- construction
    @classmethod
    def from_template(cls, template: Any = None, ctx: tpl_mod.Context | None = None, **kw: Any) -> "AwsRules":
        if ctx is None:
            ctx = tpl_mod.make_context(template)
        return cls(roles_from_template(ctx), table_keys(ctx), region=ctx.region,
                   account_id=ctx.account_id, **kw)

    def worker_env(self, logical_id: str) -> dict[str, str]:
        """Environment for a worker process that runs ``logical_id`` (see :func:`install_from_env`)."""
        role = self.roles.get(logical_id)
        doc = {
            "role": role.to_json() if role else None,
            "tables": {n: {"key": t.key, "indexes": t.indexes} for n, t in self.tables.items()},
            "region": self.region, "account_id": self.arns.account_id,
            "iam": self.iam, "limits": self.limits,
        }
        return {ENV_FUNCTION: logical_id, ENV_RULES: json.dumps(doc)}

    # ----- the hook protocol
    def before(self, call: Call) -> None:
        if call.service not in ("dynamodb", "dynamodbstreams", "s3", "secretsmanager", "apigatewaymanagementapi",
                                "glue", "cloudwatch"):
            return
        if self.iam and call.function is not None:
            self.authorize(call)
        if self.limits and call.service == "dynamodb":
            self.check_request(call)

    def after(self, call: Call, response: dict) -> dict:
        if self.limits and call.service == "dynamodb" and isinstance(response, dict):
            if call.operation in ("Query", "Scan"):
                return self.cut_page(call, response)
            if call.operation == "BatchGetItem":
                return self.cut_batch_get(call, response)
        return response

    # ----- IAM
    def authorize(self, call: Call) -> None:
        fn = call.function
        role = self.roles.get(fn)
        if role is None:
            role = Role(fn, f"{fn}-unknown-role", fn, self.arns.account_id, [])
        for perm in required_permissions(call, self.arns):
            decision = self._decision(role.statements, perm)
            if self.record_file:  # $LAKEQ_IAM_RECORD: what each function really uses
                with open(self.record_file, "a", encoding="utf-8") as fh:
                    fh.write(f"{fn} {perm.action} {perm.resource} {decision}\n")
            if decision != "allow":
                self.denied.append((fn, perm))
                log.warning("IAM: %s may not %s on %s", fn, perm.action, perm.resource)
                if self.audit_file:
                    with open(self.audit_file, "a", encoding="utf-8") as fh:
                        fh.write(f"{fn} {perm.action} {perm.resource} {call.operation}\n")
                    continue
                raise access_denied(call.service, call.operation, role, perm, decision)

    def _decision(self, statements: list, perm: Permission) -> str:
        """:func:`evaluate`, remembered per statement list and permission: the list is kept with its
        decision (so its identity is never reused by another list) and a copy of its statements as
        they were, so a list replaced, grown or changed in place (a statement replaced or edited) is
        evaluated afresh. Comparing the copy costs a small part of matching the statements."""
        key = (id(statements), perm)
        hit = self._decisions.get(key)
        if hit is not None and hit[0] is statements and hit[1] == statements:
            return hit[2]
        decision = evaluate(statements, perm)
        if len(self._decisions) > 65_536:
            self._decisions.clear()
        self._decisions[key] = (statements, copy.deepcopy(statements), decision)
        return decision

    # ----- DynamoDB request limits
    def check_request(self, call: Call) -> None:
        op, p = call.operation, call.params or {}
        wire = wire_type_error(p)
        if wire:
            raise _serialization(op, wire)
        if op == "PutItem":
            if item_size(p.get("Item")) > ITEM_LIMIT:
                raise _validation(op, "Item size has exceeded the maximum allowed size")
        elif op == "UpdateItem":
            size = self.updated_item_size(p)
            if size is not None and size > ITEM_LIMIT:
                raise _validation(op, "Item size to update has exceeded the maximum allowed size")
        elif op in ("TransactWriteItems", "TransactGetItems"):
            items = p.get("TransactItems") or []
            if len(items) > TRANSACTION_ITEMS:
                raise _validation(op, "1 validation error detected: Value at 'transactItems' failed "
                                      "to satisfy constraint: Member must have length less than or "
                                      f"equal to {TRANSACTION_ITEMS}")
            if op == "TransactWriteItems":
                total = 0
                for entry in items:
                    if "Put" in entry:
                        size = item_size(entry["Put"].get("Item"))
                        if size > ITEM_LIMIT:
                            raise _validation(op, "Item size has exceeded the maximum allowed size")
                    elif "Update" in entry:
                        u = entry["Update"]
                        size = self.updated_item_size(u) or (item_size(u.get("Key")) + sum(
                            value_size(v) for v in (u.get("ExpressionAttributeValues") or {}).values()))
                        if size > ITEM_LIMIT:
                            raise _validation(op, "Item size to update has exceeded the maximum allowed size")
                    else:
                        body = next(iter(entry.values()))
                        size = item_size(body.get("Key"))
                    total += size
                if total > TRANSACTION_BYTES:
                    raise _validation(op, "Transaction request cannot be larger than 4 MB")
        elif op == "BatchWriteItem":
            reqs = [r for rs in (p.get("RequestItems") or {}).values() for r in rs]
            if len(reqs) > BATCH_WRITE_ITEMS:
                raise _validation(op, "Too many items requested for the BatchWriteItem call")
            for r in reqs:
                if "PutRequest" in r and item_size(r["PutRequest"].get("Item")) > ITEM_LIMIT:
                    raise _validation(op, "Item size has exceeded the maximum allowed size")
        elif op == "BatchGetItem":
            n = sum(len(t.get("Keys") or []) for t in (p.get("RequestItems") or {}).values())
            if n > BATCH_GET_KEYS:
                raise _validation(op, "Too many items requested for the BatchGetItem call")

    def _store(self) -> Any:
        with self._client_lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("dynamodb", region_name=self.region)
            return self._client

    def updated_item_size(self, p: Mapping) -> int | None:
        """The size of the item an UpdateItem would leave: the stored item (read past every hook)
        with the update expression applied by moto's own engine. None when it cannot be told
        (no expression, an expression moto rejects: the store will answer that) or when the
        update's values total under :data:`SMALL_UPDATE` bytes (not worth a read per update)."""
        expr = p.get("UpdateExpression")
        if not expr:
            return None
        if _memory_store_active():
            return None  # the memory store checks the item it would leave itself (same message)
        if sum(value_size(v) for v in (p.get("ExpressionAttributeValues") or {}).values()) < SMALL_UPDATE:
            # counters, offsets, locks: left to the store's own item-size check (moto refuses
            # items over ~405,000 bytes by its estimate); an exact check costs a read per update
            return None
        from . import interceptor

        table, key = p.get("TableName"), p.get("Key") or {}
        original = interceptor._original or type(self._store())._make_api_call
        try:
            got = original(self._store(), "GetItem",
                           {"TableName": table, "Key": key, "ConsistentRead": True})
        except ClientError:
            return None
        current = dict(got.get("Item") or key)
        try:
            from moto.dynamodb.exceptions import ItemSizeTooLarge
            from moto.dynamodb.models.dynamo_type import DynamoType, Item
            from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
            from moto.dynamodb.parsing.expressions import UpdateExpressionParser
            from moto.dynamodb.parsing.validators import UpdateExpressionValidator
        except ImportError:  # pragma: no cover - moto is part of the local extra
            return None
        keys = self.tables.get(table).key if table in self.tables else list(key)

        class _Table:
            table_key_attrs = keys
            attr: list = []
            attribute_keys = keys

        try:
            hk = DynamoType(current[keys[0]]) if keys and keys[0] in current else DynamoType({"S": ""})
            rk = DynamoType(current[keys[1]]) if len(keys) > 1 and keys[1] in current else None
            item = Item(hk, rk, _jsonable(current))
            # a plain dict: moto's LimitedSizeDict adds a replaced attribute's new value to the
            # old one's size (it refuses to replace 300 KB by 150 KB); the size is computed below
            item.attrs = dict(item.attrs)
            ast = UpdateExpressionParser.make(expr)
            names = p.get("ExpressionAttributeNames") or {}
            validated = UpdateExpressionValidator(
                ast, expression_attribute_names=names,
                expression_attribute_values=_jsonable(p.get("ExpressionAttributeValues") or {}),
                item=item, table=_Table()).validate()
            validated.normalize()
            UpdateExpressionExecutor(validated, item, names).execute()
        except ItemSizeTooLarge:
            return ITEM_LIMIT + 1
        except Exception:  # noqa: BLE001 - the store will report a bad expression itself
            return None
        return item_size(item.to_json()["Attributes"])

    # ----- DynamoDB response limits
    def _key_of(self, table: str, item: Mapping, index: str | None = None) -> dict | None:
        tk = self.tables.get(table)
        if tk is None:
            return None
        names = list(tk.key) + (list(tk.indexes.get(index, [])) if index else [])
        if any(n not in item for n in names):
            return None
        return {n: item[n] for n in dict.fromkeys(names)}

    def cut_page(self, call: Call, response: dict) -> dict:
        """Cut a Query/Scan page at 1 MB of items read (the item reaching 1 MB is the last one),
        as DynamoDB does; ``LastEvaluatedKey`` = that item's key. Only when the page holds the
        items as read (no filter, no projection): the store cuts pages of filtered reads itself."""
        p = call.params or {}
        if p.get("FilterExpression") or p.get("ScanFilter") or p.get("QueryFilter") \
                or p.get("ProjectionExpression") or p.get("AttributesToGet") \
                or p.get("Select") in ("COUNT", "SPECIFIC_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES"):
            return response
        items = response.get("Items")
        if not items:
            return response
        total = 0
        for i, item in enumerate(items):
            total += item_size(item)
            if total >= PAGE_BYTES and i < len(items) - 1:
                key = self._key_of(p.get("TableName", ""), item, p.get("IndexName"))
                if key is None:
                    return response
                out = dict(response)
                out["Items"] = items[: i + 1]
                out["Count"] = i + 1
                out["ScannedCount"] = i + 1
                out["LastEvaluatedKey"] = key
                return out
        return response

    def cut_batch_get(self, call: Call, response: dict) -> dict:
        """A BatchGetItem response over 16 MB: the items past the limit become ``UnprocessedKeys``."""
        responses = response.get("Responses") or {}
        total = 0
        over = False
        out_responses: dict[str, list] = {}
        unprocessed = copy.deepcopy(response.get("UnprocessedKeys") or {})
        requested = (call.params or {}).get("RequestItems") or {}
        for table, items in responses.items():
            kept = []
            for item in items:
                size = item_size(item)
                key = self._key_of(table, item)
                if not over and total + size > BATCH_GET_RESPONSE and key is not None:
                    over = True
                if over and key is not None:
                    entry = unprocessed.setdefault(table, {"Keys": []})
                    for k in ("ProjectionExpression", "ExpressionAttributeNames", "ConsistentRead",
                              "AttributesToGet"):
                        if k in requested.get(table, {}) and k not in entry:
                            entry[k] = requested[table][k]
                    entry["Keys"].append(key)
                    continue
                total += size
                kept.append(item)
            out_responses[table] = kept
        if not over:
            return response
        out = dict(response)
        out["Responses"] = out_responses
        out["UnprocessedKeys"] = unprocessed
        return out


def _memory_store_active() -> bool:
    import sys

    memory = sys.modules.get("infra.local.dynamo_memory")
    return memory is not None and memory.active() is not None


def _jsonable(v: Any) -> Any:
    """boto3 params (bytes for B) → the JSON form moto's types take (base64 strings)."""
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, Mapping):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


# -------------------------------------------------------------------------------- construction


def for_tests(template: Any = None, stack_name: str = tpl_mod.LOCAL_STACK, **kw: Any) -> AwsRules:
    """The rules of ``template`` (default: the repo's ``template.yaml``) for the local stack."""
    ctx = tpl_mod.make_context(template, stack_name)
    return AwsRules.from_template(ctx=ctx, **kw)


def install_from_env(environ: Mapping[str, str] | None = None) -> AwsRules | None:
    """In a worker process: act as ``$LAKEQ_LOCAL_FUNCTION`` for the process's whole life and
    install the rules described by ``$LAKEQ_LOCAL_AWS_RULES`` (see :meth:`AwsRules.worker_env`)."""
    from . import interceptor

    env = os.environ if environ is None else environ
    fn = env.get(ENV_FUNCTION)
    doc = env.get(ENV_RULES)
    if not fn or not doc:
        return None
    d = json.loads(doc)
    roles = {fn: Role.from_json(d["role"])} if d.get("role") else {}
    tables = {n: TableKeys(list(t["key"]), dict(t["indexes"])) for n, t in (d.get("tables") or {}).items()}
    rules = AwsRules(roles, tables, region=d.get("region", tpl_mod.DEFAULT_REGION),
                     account_id=d.get("account_id", tpl_mod.DEFAULT_ACCOUNT),
                     iam=d.get("iam", True), limits=d.get("limits", True))
    interceptor.set_function(fn)
    interceptor.add(rules)
    return rules


# ------------------------------------------------------------------------ Lambda / API Gateway


def invocation_request_size(event: Any) -> int:
    """Bytes of the Invoke request Lambda receives for ``event`` (compact JSON, UTF-8)."""
    return len(json.dumps(event, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))


def invocation_response_size(result: Any) -> int:
    """Bytes of the response payload the python3.11 runtime sends for ``result`` (its encoder:
    ``", "`` / ``": "`` separators, non-ASCII escaped)."""
    if isinstance(result, (bytes, bytearray)):
        return len(result)
    return len(json.dumps(result, default=str).encode("utf-8"))


def request_too_large(body: bytes | str | None, event: Any | None = None) -> str | None:
    """Why API Gateway + Lambda refuse this request (None when they accept it): an HTTP API body
    over 10 MB, or an event over Lambda's 6 MB synchronous invocation payload."""
    n = len(body.encode("utf-8")) if isinstance(body, str) else len(body or b"")
    if n > HTTP_API_BODY_LIMIT:
        return f"request body of {n} bytes is over API Gateway's {HTTP_API_BODY_LIMIT}-byte limit"
    if event is not None:
        size = invocation_request_size(event)
        if size > LAMBDA_REQUEST_LIMIT:
            return (f"the Lambda event of {size} bytes is over Lambda's {LAMBDA_REQUEST_LIMIT}-byte "
                    "invocation payload limit")
    return None


def response_too_large(result: Any) -> str | None:
    """Why Lambda refuses this handler result (None when it is within the 6 MB limit)."""
    size = invocation_response_size(result)
    if size > LAMBDA_RESPONSE_LIMIT:
        return (f"Response payload size ({size} bytes) exceeded maximum allowed payload size "
                f"({LAMBDA_RESPONSE_LIMIT} bytes).")
    return None


def too_large_body(reason: str) -> dict:
    """The 413 body: API Gateway's own ``message`` plus the API's error shape."""
    return {"message": GATEWAY_TOO_LARGE["message"],
            "error": {"code": "payload_too_large", "message": reason}}


__all__ = [
    "AwsRules", "Role", "Permission", "for_tests", "install_from_env", "roles_from_template",
    "required_permissions", "evaluate", "item_size", "value_size", "number_size",
    "request_too_large", "response_too_large", "invocation_request_size",
    "invocation_response_size", "too_large_body", "GATEWAY_INTERNAL_ERROR", "ITEM_LIMIT",
    "LAMBDA_REQUEST_LIMIT", "LAMBDA_RESPONSE_LIMIT", "HTTP_API_BODY_LIMIT", "PAGE_BYTES",
    "BATCH_GET_RESPONSE",
]
