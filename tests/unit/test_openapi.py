"""The OpenAPI description: a valid OpenAPI 3.0 document whose routes are exactly the template's.

``layers/core/lakeq/openapi.yaml`` is the file (the core layer ships it; the admin function serves it
at ``GET /v1/openapi.yaml``); ``openapi.yaml`` at the project root is a relative symlink to it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from infra.local import template as tpl

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "layers" / "core" / "lakeq" / "openapi.yaml"
LINK = ROOT / "openapi.yaml"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def spec() -> dict:
    with open(SPEC, encoding="utf-8") as f:
        return yaml.safe_load(f)


def spec_routes(spec: dict) -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in METHODS}


def template_routes() -> set[tuple[str, str]]:
    specs = tpl.functions(tpl.load_template())
    return {(method, path) for method, path, _ in tpl.iter_routes(specs)}


def test_spec_is_valid_openapi_3_0(spec):
    from openapi_spec_validator import OpenAPIV30SpecValidator, validate

    assert spec["openapi"].startswith("3.0.")
    validate(spec, cls=OpenAPIV30SpecValidator)


def test_root_openapi_yaml_is_a_relative_symlink_to_the_layer_file():
    assert LINK.is_symlink()
    target = os.readlink(LINK)
    assert not os.path.isabs(target)
    assert LINK.resolve() == SPEC.resolve()


def test_routes_equal_template_http_api_routes(spec):
    routes = template_routes()
    assert ("ANY", "/v1/health") not in routes  # every route has an explicit method
    assert spec_routes(spec) == routes


def test_admin_function_serves_openapi_yaml():
    specs = tpl.functions(tpl.load_template())
    owner = {(m, p): s.logical_id for m, p, s in tpl.iter_routes(specs)}
    assert owner.get(("GET", "/v1/openapi.yaml")) == "AdminFunction"


def test_path_parameters_are_declared(spec):
    for path, item in spec["paths"].items():
        names = set(re.findall(r"\{([^}]+)\}", path))
        for method, op in item.items():
            if method not in METHODS:
                continue
            declared = {
                _deref(spec, p)["name"]
                for p in item.get("parameters", []) + op.get("parameters", [])
                if _deref(spec, p)["in"] == "path"
            }
            assert declared == names, f"{method.upper()} {path}"


def test_every_operation_documents_its_errors(spec):
    public = {("GET", "/v1/health"), ("GET", "/v1/openapi.yaml"), ("GET", "/console"), ("GET", "/console/{asset}")}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            codes = set(op["responses"])
            assert codes & {"200", "201", "202", "204"}, f"{method.upper()} {path}: no success status"
            if (method.upper(), path) in public:
                assert op.get("security") == [], f"{method.upper()} {path} takes no auth"
            elif path in ("/", "/{account}/{queue}"):  # the SQS endpoint: SigV4, SQS's own error statuses
                assert op.get("security") == [{"sigv4": []}], f"{method.upper()} {path}"
                assert {"400", "403"} <= codes, f"{method.upper()} {path}"
            else:
                assert "security" not in op  # the global bearer scheme applies
                assert {"401", "403"} <= codes, f"{method.upper()} {path}"
            if "{" in path:
                assert "404" in codes


def test_names_and_limits_match_the_code(spec):
    from lakeq.common import names
    from lakeq.contract import validation as v

    schemas = spec["components"]["schemas"]
    name = re.compile(schemas["Name"]["pattern"])
    topic = re.compile(schemas["TopicName"]["pattern"])
    for s in ["a", "quotes", "A-b_c.9", "x" * 200, "", "a/b", "a b", "é"]:
        assert bool(name.fullmatch(s)) == names.is_name(s), s
    for s in ["quotes", "quotes/sh", "a/b/c", "/a", "a/", "a//b", "a b", "x" * 200, "x" * 201]:
        ok = bool(topic.fullmatch(s)) and len(s) <= schemas["TopicName"]["maxLength"]
        assert ok == names.is_topic(s), s
    assert schemas["TopicIn"]["properties"]["queues"]["minimum"] == v.QUEUES_MIN
    assert schemas["TopicIn"]["properties"]["queues"]["maximum"] == v.QUEUES_MAX
    assert schemas["TopicIn"]["properties"]["queues"]["default"] == v.QUEUES_DEFAULT
    vis = schemas["ClientIn"]["properties"]["visibility_timeout_ms"]
    assert (vis["minimum"], vis["maximum"], vis["default"]) == (v.VISIBILITY_MIN, v.VISIBILITY_MAX, v.VISIBILITY_DEFAULT)
    msgs = schemas["ProduceIn"]["properties"]["messages"]
    assert msgs["maxItems"] == v.MAX_MESSAGES
    msg = schemas["MessageIn"]["properties"]
    assert msg["body"]["maxLength"] == v.MAX_BODY_BYTES
    assert msg["tags"]["maxItems"] == v.MAX_TAGS
    assert msg["tags"]["items"]["maxLength"] == v.MAX_TAG_LEN
    assert msg["id"]["maxLength"] == v.MAX_ID_LEN
    assert msg["key"]["maxLength"] == v.MAX_KEY_LEN
    assert schemas["Properties"]["maxProperties"] == v.MAX_PROPERTIES
    pull = {p["name"]: p["schema"] for p in spec["paths"]["/v1/topics/{topic}/messages"]["get"]["parameters"]}
    assert (pull["max"]["minimum"], pull["max"]["maximum"], pull["max"]["default"]) == (1, v.MAX_PULL, v.DEFAULT_PULL)
    assert (pull["wait_ms"]["minimum"], pull["wait_ms"]["maximum"]) == (0, v.MAX_WAIT_MS)
    assert schemas["ResetIn"]["properties"]["queue"]["maximum"] == v.QUEUES_MAX - 1


def test_receipt_format_matches_the_code(spec):
    from lakeq.log.receipts import Receipt, parse, topic_queue_field

    pattern = re.compile(spec["components"]["schemas"]["PullOut"]["properties"]["receipt"]["pattern"])
    r = str(Receipt("lakeq-local", topic_queue_field("quotes/sh", 3), 5, 9, 1_700_000_000_000))
    assert pattern.fullmatch(r)
    assert parse(r).topic_queue == ("quotes/sh", 3)


def _deref(spec: dict, node: dict) -> dict:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/")
        node = spec
        for part in ref[2:].split("/"):
            node = node[part]
    return node
