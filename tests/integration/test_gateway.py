"""infra.local.gateway: route matching on the raw path, error shapes, the payload v2.0 event."""
from __future__ import annotations

import base64
import json
import textwrap
import time

import pytest
from werkzeug.test import Client

from infra.local.gateway import Gateway, to_response

ECHO = textwrap.dedent('''
    import json
    import helper  # a sibling module, importable while app.py is imported

    def lambda_handler(event, context):
        if event.get("rawPath", "").endswith("/boom"):
            raise RuntimeError("boom")
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json", "x-fn": helper.NAME},
            "cookies": ["a=1", "b=2"],
            "body": json.dumps({"event": event, "context": {
                "function_name": context.function_name,
                "memory_limit_in_mb": context.memory_limit_in_mb,
                "invoked_function_arn": context.invoked_function_arn,
                "aws_request_id": context.aws_request_id,
                "remaining": context.get_remaining_time_in_millis(),
            }}),
        }
''')

TEMPLATE = {
    "Globals": {"Function": {"Timeout": 7, "MemorySize": 256}},
    "Resources": {
        "Api": {"Type": "AWS::Serverless::HttpApi"},
        "EchoFunction": {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "CodeUri": "echo/",
                "Handler": "app.lambda_handler",
                "Events": {
                    "Produce": {"Type": "HttpApi", "Properties": {
                        "ApiId": {"Ref": "Api"}, "Method": "POST", "Path": "/v1/topics/{topic}/messages"}},
                    "Pull": {"Type": "HttpApi", "Properties": {
                        "ApiId": {"Ref": "Api"}, "Method": "GET", "Path": "/v1/topics/{topic}/messages"}},
                    "List": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/v1/topics"}},
                    "Exact": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/v1/groups/special/offsets"}},
                    "Offsets": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/v1/groups/{group}/offsets"}},
                    "Boom": {"Type": "HttpApi", "Properties": {"Method": "POST", "Path": "/v1/boom"}},
                    "Yaml": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/v1/openapi.yaml"}},
                },
            },
        },
        "OtherFunction": {
            "Type": "AWS::Serverless::Function",
            "Properties": {"CodeUri": "other/", "Handler": "main.handler", "Events": {
                "Any": {"Type": "HttpApi", "Properties": {"Method": "ANY", "Path": "/v1/any/{id}"}}}},
        },
    },
}


@pytest.fixture
def client(tmp_path):
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "app.py").write_text(ECHO)
    (tmp_path / "echo" / "helper.py").write_text('NAME = "echo"\n')
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "helper.py").write_text('NAME = "other"\n')
    (tmp_path / "other" / "main.py").write_text(textwrap.dedent('''
        import helper
        def handler(event, context):
            return {"fn": helper.NAME, "route": event["routeKey"], "params": event.get("pathParameters")}
    '''))
    (tmp_path / "template.yaml").write_text(json.dumps(TEMPLATE))
    gw = Gateway(tmp_path / "template.yaml", stack_name="gwtest", max_body=1024)
    return Client(gw, use_cookies=False)


def _event(resp):
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["event"]


def test_encoded_topic(client):
    """API Gateway's HTTP API hands the path percent-decoded (live captures: ``/a%2Fb`` arrives as
    ``/a/b``); the route matched is in ``routeKey`` and ``pathParameters`` (the handlers route on
    those: lakeq.api.http.routed_path)."""
    ev = _event(client.post("/v1/topics/quotes%2Fsh/messages?x=1", json={"a": 1}))
    assert ev["routeKey"] == "POST /v1/topics/{topic}/messages"
    assert ev["rawPath"] == "/v1/topics/quotes/sh/messages"
    assert ev["pathParameters"] == {"topic": "quotes/sh"}
    assert ev["requestContext"]["http"]["path"] == "/v1/topics/quotes/sh/messages"
    assert json.loads(ev["body"]) == {"a": 1}


def test_unencoded_multi_segment_topic_is_normalised(client):
    ev = _event(client.get("/v1/topics/quotes/sh/deep/messages?group=g"))
    assert ev["routeKey"] == "GET /v1/topics/{topic}/messages"
    assert ev["pathParameters"] == {"topic": "quotes/sh/deep"}
    assert ev["rawPath"] == "/v1/topics/quotes/sh/deep/messages"
    ev = _event(client.get("/v1/topics/quotes/messages"))
    assert ev["pathParameters"] == {"topic": "quotes"}
    assert ev["rawPath"] == "/v1/topics/quotes/messages"


def test_exact_literal_route_wins(client):
    assert _event(client.get("/v1/groups/special/offsets"))["routeKey"] == "GET /v1/groups/special/offsets"
    ev = _event(client.get("/v1/groups/risk/offsets"))
    assert ev["routeKey"] == "GET /v1/groups/{group}/offsets"
    assert ev["pathParameters"] == {"group": "risk"}
    # a plain parameter takes exactly one segment
    assert client.get("/v1/groups/a/b/offsets").status_code == 404
    assert _event(client.get("/v1/openapi.yaml"))["routeKey"] == "GET /v1/openapi.yaml"


def test_404_405_413_shapes(client):
    r = client.get("/v1/nothing")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "not_found"
    assert set(r.get_json()["error"]) == {"code", "message"}
    r = client.delete("/v1/topics/quotes/messages")
    assert r.status_code == 405
    assert r.get_json()["error"]["code"] == "method_not_allowed"
    assert set(r.headers["Allow"].split(", ")) == {"GET", "POST"}
    r = client.post("/v1/topics/q/messages", data=b"x" * 1025)
    assert r.status_code == 413
    assert r.get_json()["error"]["code"] == "payload_too_large"
    assert client.post("/v1/topics/q/messages", data=b"x" * 1024).status_code == 200


def test_handler_exception_is_500(client, caplog):
    r = client.post("/v1/boom")
    assert r.status_code == 500
    assert r.get_json()["error"]["code"] == "internal_error"
    assert any("boom" in (rec.exc_text or "") or rec.exc_info for rec in caplog.records)


def test_event_v2_shape(client):
    r = client.get(
        "/v1/topics?b=1&a=x&a=y&empty=",
        headers={"X-Custom": "V", "Cookie": "c1=1; c2=2", "User-Agent": "ua/1"},
    )
    ev = _event(r)
    assert ev["version"] == "2.0"
    assert ev["routeKey"] == "GET /v1/topics"
    assert ev["rawPath"] == "/v1/topics"
    assert ev["rawQueryString"] == "b=1&a=x&a=y&empty="
    assert ev["queryStringParameters"] == {"b": "1", "a": "x,y", "empty": ""}
    assert ev["cookies"] == ["c1=1", "c2=2"]
    assert ev["headers"]["x-custom"] == "V"
    assert all(k == k.lower() for k in ev["headers"])
    assert "pathParameters" not in ev and "body" not in ev
    assert ev["isBase64Encoded"] is False
    rc = ev["requestContext"]
    assert rc["stage"] == "$default" and rc["routeKey"] == "GET /v1/topics"
    assert rc["http"] == {"method": "GET", "path": "/v1/topics", "protocol": "HTTP/1.1",
                          "sourceIp": "127.0.0.1", "userAgent": "ua/1"}
    assert rc["requestId"] and rc["apiId"] and rc["domainName"] and rc["time"]
    assert isinstance(rc["timeEpoch"], int)
    ctx = r.get_json()["context"]
    assert ctx["function_name"] == "gwtest-EchoFunction"
    assert ctx["memory_limit_in_mb"] == 256
    assert ctx["invoked_function_arn"].endswith(":function:gwtest-EchoFunction")
    assert ctx["aws_request_id"] == rc["requestId"]
    # the function's timeout bounds what is left; how much of it the call used is the machine's
    # business (a loaded CI took 9.5 s to run this echo, and 0 was left)
    assert isinstance(ctx["remaining"], int) and 0 <= ctx["remaining"] <= 7000
    # response mapping: headers and cookies
    assert r.headers["x-fn"] == "echo"
    assert r.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_binary_body_is_base64(client):
    data = bytes(range(256))
    ev = _event(client.post("/v1/topics/t/messages", data=data,
                            headers={"Content-Type": "application/octet-stream"}))
    assert ev["isBase64Encoded"] is True
    assert base64.b64decode(ev["body"]) == data


def test_two_functions_with_same_sibling_module_name(client):
    assert _event(client.get("/v1/topics"))  # loads echo (helper = "echo")
    r = client.put("/v1/any/42")
    assert r.status_code == 200
    assert r.get_json() == {"fn": "other", "route": "ANY /v1/any/{id}", "params": {"id": "42"}}
    assert client.get("/v1/topics").headers["x-fn"] == "echo"


def test_to_response_variants():
    r = to_response({"statusCode": 204})
    assert r.status_code == 204 and r.get_data() == b""
    r = to_response({"statusCode": 200, "body": base64.b64encode(b"\x00\x01").decode(),
                     "isBase64Encoded": True, "headers": {"Content-Type": "application/octet-stream"},
                     "multiValueHeaders": {"X-M": ["1", "2"]}})
    assert r.get_data() == b"\x00\x01" and r.headers.getlist("X-M") == ["1", "2"]
    assert r.headers["Content-Type"] == "application/octet-stream"
    r = to_response({"hello": "world"})
    assert r.status_code == 200 and r.get_json() == {"hello": "world"}


def test_repo_template_routes_resolve():
    gw = Gateway()
    find = gw.routes.find
    route, params, _ = find("POST", ["v1", "topics", "quotes%2Fsh", "messages"])
    assert route.spec.logical_id == "ProduceFunction" and params == {"topic": ["quotes%2Fsh"]}
    route, _, _ = find("GET", ["v1", "topics", "quotes", "sh", "messages"])
    assert route.spec.logical_id == "ConsumeFunction"
    route, _, _ = find("GET", ["v1", "topics"])
    assert route.spec.logical_id == "AdminFunction"
    route, _, allowed = find("DELETE", ["v1", "acks"])
    assert route is None and allowed == {"POST"}


def test_concurrent_invocations_get_separate_instances(tmp_path):
    import threading

    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "app.py").write_text(textwrap.dedent('''
        import threading, time
        STATE = {"busy": False}
        def lambda_handler(event, context):
            assert not STATE["busy"], "one invocation at a time per instance"
            STATE["busy"] = True
            time.sleep(0.2)
            STATE["busy"] = False
            return {"statusCode": 200, "body": str(id(STATE))}
    '''))
    tpl = {"Resources": {"SlowFunction": {"Type": "AWS::Serverless::Function", "Properties": {
        "CodeUri": "slow/", "Handler": "app.lambda_handler",
        "Events": {"Get": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/slow"}}}}}}}
    (tmp_path / "template.yaml").write_text(json.dumps(tpl))
    gw = Gateway(tmp_path / "template.yaml")
    results = []

    def call():
        results.append(Client(gw).get("/slow"))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [200, 200, 200]
    assert len({r.get_data() for r in results}) == 3
    assert gw.handlers.instances("SlowFunction") == 3
    assert Client(gw).get("/slow").status_code == 200  # a warm instance is reused
    assert gw.handlers.instances("SlowFunction") == 3


def test_layer_modules_are_private_to_each_instance(tmp_path):
    """A module-level object in a layer (a powertools Router, say) is not shared by instances."""
    import sys
    import threading

    (tmp_path / "layer" / "sharedmod").mkdir(parents=True)
    (tmp_path / "layer" / "sharedmod" / "__init__.py").write_text("CURRENT = {}\n")
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "app.py").write_text(textwrap.dedent('''
        import time
        import sharedmod
        def lambda_handler(event, context):
            sharedmod.CURRENT["q"] = event["queryStringParameters"]["q"]
            time.sleep(0.2)
            return {"statusCode": 200, "body": sharedmod.CURRENT["q"]}
    '''))
    tpl = {"Resources": {
        "Layer": {"Type": "AWS::Serverless::LayerVersion", "Properties": {"ContentUri": "layer/"}},
        "Fn": {"Type": "AWS::Serverless::Function", "Properties": {
            "CodeUri": "fn/", "Handler": "app.lambda_handler",
            "Events": {"Get": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/x"}}}}}}}
    (tmp_path / "template.yaml").write_text(json.dumps(tpl))
    gw = Gateway(tmp_path / "template.yaml")
    results = {}

    def call(q):
        results[q] = Client(gw).get(f"/x?q={q}").get_data(as_text=True)

    threads = [threading.Thread(target=call, args=(str(i),)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"0": "0", "1": "1", "2": "2"}
    assert "sharedmod" not in sys.modules


def test_worker_processes_isolate_invocations_and_report_errors(tmp_path):
    """The local stack's default: one worker process per warm instance (ProcessPool)."""
    import threading

    from infra.local.worker import ProcessPool

    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "app.py").write_text(textwrap.dedent('''
        import os, time
        CURRENT = {}
        def lambda_handler(event, context):
            q = event["queryStringParameters"]["q"]
            if q == "boom":
                raise ValueError("boom")
            print("printed output goes to stderr")
            CURRENT["q"] = q
            time.sleep(0.3)
            return {"statusCode": 200, "headers": {"x-pid": str(os.getpid()),
                    "x-env": os.environ.get("ONLY_MINE", ""),
                    "x-fn": context.function_name},
                    "body": CURRENT["q"]}
    '''))
    tpl = {"Resources": {
        "Fn": {"Type": "AWS::Serverless::Function", "Properties": {
            "CodeUri": "fn/", "Handler": "app.lambda_handler",
            "Environment": {"Variables": {"ONLY_MINE": {"Fn::Sub": "${AWS::StackName}-x"}}},
            "Events": {"Get": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/x"}}}}}}}
    (tmp_path / "template.yaml").write_text(json.dumps(tpl))
    pool = ProcessPool()
    try:
        gw = Gateway(tmp_path / "template.yaml", stack_name="wk", handler_cache=pool)
        gw.preload()
        assert pool.instances("Fn") == 1
        results = {}

        def call(q):
            results[q] = Client(gw).get(f"/x?q={q}")

        threads = [threading.Thread(target=call, args=(str(i),)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {q: r.get_data(as_text=True) for q, r in results.items()} == {"0": "0", "1": "1", "2": "2"}
        assert len({r.headers["x-pid"] for r in results.values()}) == 3
        assert {r.headers["x-env"] for r in results.values()} == {"wk-x"}
        assert {r.headers["x-fn"] for r in results.values()} == {"wk-Fn"}
        r = Client(gw).get("/x?q=boom")
        assert r.status_code == 500 and r.get_json()["error"]["code"] == "internal_error"
        assert pool.instances("Fn") == 3
    finally:
        pool.close()
    assert pool.instances("Fn") == 0


def test_moto_reset_ends_every_warm_worker_in_conformance_mode_only(tmp_path, monkeypatch):
    """``POST /moto-api/reset`` (--sqs-any-signature only): the gateway's reset runs before the answer and
    the pool's workers go, idle ones at once, a busy one when its invocation returns: the next
    invocation has none of their module-level state (infra/local/reset.py)."""
    import threading

    from infra.local.worker import ProcessPool

    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "app.py").write_text(textwrap.dedent('''
        import os, time
        SEEN = []  # a warm environment's cache
        def lambda_handler(event, context):
            q = event["queryStringParameters"]["q"]
            if q == "slow":
                open(os.environ["RESET_TEST_STARTED"], "w").close()
                time.sleep(1.5)
            SEEN.append(q)
            return {"statusCode": 200, "body": f"{os.getpid()} {len(SEEN)}"}
    '''))
    tpl = {"Resources": {"Fn": {"Type": "AWS::Serverless::Function", "Properties": {
        "CodeUri": "fn/", "Handler": "app.lambda_handler",
        "Events": {"Get": {"Type": "HttpApi", "Properties": {"Method": "GET", "Path": "/x"}}}}}}}
    (tmp_path / "template.yaml").write_text(json.dumps(tpl))
    started = tmp_path / "started"
    monkeypatch.setenv("RESET_TEST_STARTED", str(started))
    pool = ProcessPool()
    resets = []
    try:
        gw = Gateway(tmp_path / "template.yaml", stack_name="rs", handler_cache=pool,
                     reset=lambda: (resets.append(1), pool.reset(), {"items": 0})[-1])
        get = lambda q: Client(gw).get(f"/x?q={q}").get_data(as_text=True).split()  # noqa: E731
        pid, n = get("a")
        assert get("b") == [pid, "2"]
        monkeypatch.delenv("LAKEQ_SQS_ANY_SIGNATURE", raising=False)
        assert Client(gw).post("/moto-api/reset").status_code == 404 and resets == []
        assert get("c") == [pid, "3"]
        monkeypatch.setenv("LAKEQ_SQS_ANY_SIGNATURE", "1")
        r = Client(gw).post("/moto-api/reset")
        assert r.status_code == 200 and r.get_json() == {"status": "ok", "items": 0} and resets == [1]
        assert pool.instances("Fn") == 0
        pid2, n = get("d")
        assert pid2 != pid and n == "1"
        slow = threading.Thread(target=get, args=("slow",))
        slow.start()
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:  # the slow invocation is running
            time.sleep(0.05)
        assert started.exists()
        assert Client(gw).post("/moto-api/reset").status_code == 200
        slow.join()
        assert pool.instances("Fn") == 0
        assert get("e")[1] == "1"
    finally:
        pool.close()
