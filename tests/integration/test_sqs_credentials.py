"""Issue 9: SQS credentials (admin routes, storage without secrets) and SigV4 authentication of
SQS requests (lakeq.sqs.auth), in-process against moto with the template's tables, secret and
IAM roles."""
from __future__ import annotations

import base64
import json

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from infra.local import interceptor
from infra.local import template as tpl
from lakeq.sqs import auth as sqs_auth
from lakeq.sqs import keys as sqs_keys
from tests.handlers import Api

pytestmark = pytest.mark.usefixtures("aws")
URL = "http://127.0.0.1:3000/"


@pytest.fixture
def api():
    return Api()


@pytest.fixture
def client_key(api):
    """A consumer 'worker' on topic 'jobs'; its API key."""
    assert api.call("POST", "/v1/topics", body={"name": "jobs", "queues": 2})[0] == 201
    st, b = api.call("POST", "/v1/clients", body={"name": "worker", "role": "consumer", "topics": ["jobs"]})
    assert st == 201, b
    return b["api_key"]


def signed(akid, secret, target="AmazonSQS.ListQueues", body=b"{}", url=URL, region="us-east-1"):
    """A request as boto3's sqs client signs it: (method, path, query, headers, body)."""
    req = AWSRequest(method="POST", url=url, data=body,
                     headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": target})
    SigV4Auth(Credentials(akid, secret), "sqs", region).add_auth(req)
    p = req.prepare()
    headers = {k.lower(): v for k, v in p.headers.items()}
    headers.setdefault("host", "127.0.0.1:3000")
    return "POST", "/", "", headers, p.body


def auth(*req):
    """authenticate() as the SQS function would call it (IAM of SqsFunction when the template has it)."""
    fn = "SqsFunction" if "SqsFunction" in tpl.load_template()["Resources"] else None
    sqs_keys._master = None  # another function, another container: it reads the master itself
    if fn is None:
        return sqs_auth.authenticate(*req)
    with interceptor.acting_as(fn):
        return sqs_auth.authenticate(*req)


def test_issue_list_revoke_and_check_order(api, client_key):
    st, b = api.call("POST", "/v1/clients/worker/sqs-credentials")
    assert st == 201, b
    assert set(b) == {"name", "access_key_id", "secret_access_key"} and b["name"] == "worker"
    akid = b["access_key_id"]
    assert len(akid) == 20 and akid.startswith("LQAK") and akid.isupper() and akid.isalnum()
    assert len(b["secret_access_key"]) >= 40
    st, lst = api.call("GET", "/v1/clients/worker/sqs-credentials")
    assert (st, lst) == (200, {"name": "worker", "sqs_credentials": [{"access_key_id": akid}]})
    # 400 → 404 → 403
    assert api.call("POST", "/v1/clients/Bad Name!/sqs-credentials")[0] == 400
    assert api.call("POST", "/v1/clients/nobody/sqs-credentials", key=client_key)[0] == 404
    st, e = api.call("POST", "/v1/clients/worker/sqs-credentials", key=client_key)
    assert (st, e["error"]["code"]) == (403, "forbidden")
    assert api.call("GET", "/v1/clients/worker/sqs-credentials", key=client_key)[0] == 403
    assert api.call("DELETE", "/v1/clients/worker/sqs-credentials/not-an-id")[0] == 400
    assert api.call("DELETE", "/v1/clients/worker/sqs-credentials/LQAKAAAAAAAAAAAAAAAA")[0] == 404
    assert api.call("DELETE", f"/v1/clients/nobody/sqs-credentials/{akid}")[0] == 404
    assert api.call("DELETE", f"/v1/clients/worker/sqs-credentials/{akid}", key=client_key)[0] == 403
    assert api.call("GET", "/v1/clients/worker/sqs-credentials", key=None)[0] == 401
    # revoke
    assert api.call("DELETE", f"/v1/clients/worker/sqs-credentials/{akid}") == (204, "")
    assert api.call("DELETE", f"/v1/clients/worker/sqs-credentials/{akid}")[0] == 404
    assert api.call("GET", "/v1/clients/worker/sqs-credentials")[1]["sqs_credentials"] == []
    # the client's API keys are untouched (same key_version CAS, other attribute)
    assert api.call("GET", "/v1/clients/worker/keys")[0] == 200


def test_at_most_ten_live_credentials(api, client_key):
    ids = [api.call("POST", "/v1/clients/worker/sqs-credentials")[1]["access_key_id"] for _ in range(10)]
    assert len(set(ids)) == 10
    st, e = api.call("POST", "/v1/clients/worker/sqs-credentials")
    assert (st, e["error"]["code"]) == (409, "too_many_sqs_credentials")
    assert api.call("DELETE", f"/v1/clients/worker/sqs-credentials/{ids[3]}")[0] == 204
    assert api.call("POST", "/v1/clients/worker/sqs-credentials")[0] == 201


def test_no_secret_or_secret_material_in_any_table(api, client_key, aws):
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    admin = api.call("GET", "/v1/sqs-credentials/admin")[1]
    master = aws["secretsmanager"].get_secret_value(SecretId=tpl.environment(tpl.load_template())["LAKEQ_SQS_SECRET"])
    master = master["SecretString"]
    needles = {b["secret_access_key"], admin["secret_access_key"], master}
    for s in list(needles):  # other spellings of the same bytes
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)) if s != master else master.encode()
        needles |= {raw.hex(), base64.b64encode(raw).decode().rstrip("="), base64.b32encode(raw).decode().rstrip("=")}
    ddb = aws["dynamodb"]
    dumped = []
    for name in ddb.list_tables()["TableNames"]:
        for page in ddb.get_paginator("scan").paginate(TableName=name):
            dumped.extend(json.dumps(i) for i in page["Items"])
    text = "\n".join(dumped)
    assert b["access_key_id"] in text  # the mapping is there...
    for n in needles:
        assert n not in text  # ...the secrets, the master and their encodings are not


def test_signed_requests_authenticate_as_the_client_and_revocation(api, client_key):
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    p = auth(*signed(b["access_key_id"], b["secret_access_key"]))
    assert (p.admin, p.client) == (False, "worker")
    # any region in the scope
    p = auth(*signed(b["access_key_id"], b["secret_access_key"], region="eu-west-3"))
    assert p.client == "worker"
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*signed(b["access_key_id"], b["secret_access_key"][:-1] + "x"))
    assert (e.value.code, e.value.status) == ("SignatureDoesNotMatch", 403)
    assert e.value.json_type.endswith("#InvalidSignatureException")
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*signed("LQAKAAAAAAAAAAAAAAAA", b["secret_access_key"]))
    assert (e.value.code, e.value.status) == ("InvalidClientTokenId", 403)
    # a tampered body
    m, path, q, h, body = signed(b["access_key_id"], b["secret_access_key"], body=b'{"QueueNamePrefix": "a"}')
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(m, path, q, h, b'{"QueueNamePrefix": "b"}')
    assert e.value.code == "SignatureDoesNotMatch"
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth("POST", "/", "", {"host": "x"}, b"{}")
    assert (e.value.code, e.value.status) == ("MissingAuthenticationToken", 403)
    # revoked: InvalidClientTokenId at once (this container forgot it)
    req = signed(b["access_key_id"], b["secret_access_key"])
    assert api.call("DELETE", f"/v1/clients/worker/sqs-credentials/{b['access_key_id']}")[0] == 204
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*req)
    assert e.value.code == "InvalidClientTokenId"


def test_revocation_reaches_other_containers_within_the_cache_ttl(api, client_key, monkeypatch):
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    req = signed(b["access_key_id"], b["secret_access_key"])
    now = [1000.0]
    monkeypatch.setattr(sqs_keys, "monotonic", lambda: now[0])
    assert auth(*req).client == "worker"  # cached for CACHE_TTL_S
    from lakeq.sqs.credentials import item_key
    from lakeq.store.models import KeyModel
    KeyModel(item_key(b["access_key_id"])).delete()  # revoked by "another container"
    assert auth(*req).client == "worker"
    now[0] += sqs_keys.CACHE_TTL_S + 0.1
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*req)
    assert e.value.code == "InvalidClientTokenId"


def test_expired_request(api, client_key, monkeypatch):
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    req = signed(b["access_key_id"], b["secret_access_key"])
    import time
    monkeypatch.setattr(sqs_auth, "wall_clock", lambda: time.time() + 16 * 60)
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*req)
    assert (e.value.code, e.value.status) == ("RequestExpired", 400)


def test_admin_credential(api, client_key):
    st, a = api.call("GET", "/v1/sqs-credentials/admin")
    assert st == 200 and a["admin"] is True and a["access_key_id"].startswith("LQAD") and len(a["access_key_id"]) == 20
    assert api.call("GET", "/v1/sqs-credentials/admin", key=client_key)[0] == 403
    assert api.call("GET", "/v1/sqs-credentials/admin")[1] == a  # derived: the same every time
    p = auth(*signed(a["access_key_id"], a["secret_access_key"]))
    assert p.admin is True
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth(*signed(a["access_key_id"], "nope"))
    assert e.value.code == "SignatureDoesNotMatch"
    with pytest.raises(sqs_auth.SqsAuthError) as e:  # another admin-shaped id
        auth(*signed("LQADAAAAAAAAAAAAAAAA", a["secret_access_key"]))
    assert e.value.code == "InvalidClientTokenId"


def test_conformance_flag_accepts_any_well_formed_signature(api, client_key, monkeypatch):
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    with pytest.raises(sqs_auth.SqsAuthError):
        auth(*signed(b["access_key_id"], "wrong"))
    monkeypatch.setenv("LAKEQ_SQS_ANY_SIGNATURE", "1")
    assert auth(*signed(b["access_key_id"], "wrong")).client == "worker"  # known id: its client
    p = auth(*signed("test", "test"))  # unknown id: the admin
    assert (p.admin, p.client) == (True, None)
    with pytest.raises(sqs_auth.SqsAuthError) as e:  # still a signature, well formed
        auth("POST", "/", "", {"host": "x", "authorization": "AWS4-HMAC-SHA256 Credential=x"}, b"")
    assert e.value.code == "IncompleteSignature"
    with pytest.raises(sqs_auth.SqsAuthError) as e:
        auth("POST", "/", "", {"host": "x"}, b"")
    assert e.value.code == "MissingAuthenticationToken"


def test_the_master_secret_needs_its_iam_permission():
    """Only functions whose role grants secretsmanager:GetSecretValue on the secret may read it."""
    sqs_keys.clear_caches()
    with interceptor.acting_as("ProduceFunction"), pytest.raises(ClientError) as e:
        sqs_keys.master_secret()
    assert e.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "secretsmanager:GetSecretValue" in str(e.value)
    with interceptor.acting_as("AdminFunction"):
        assert len(sqs_keys.master_secret()) == 64


# --- through the SQS function: boto3's own client, real signatures, permissions by role -------------
def _sqs(akid, secret):
    import boto3

    from tests.integration.sqs_harness import BASE, Harness

    h = Harness()
    c = boto3.client("sqs", endpoint_url=BASE, region_name="eu-west-1", aws_access_key_id=akid,
                     aws_secret_access_key=secret)
    c.meta.events.register_first("before-send.sqs", h.send)
    return c


def _code(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_permissions_follow_the_clients_role_and_topics(api, client_key):
    admin = api.call("GET", "/v1/sqs-credentials/admin")[1]
    a = _sqs(admin["access_key_id"], admin["secret_access_key"])
    url = a.create_queue(QueueName="orders")["QueueUrl"]
    a.create_queue(QueueName="other")
    for name, role, topics in (("shop", "producer", ["orders"]), ("billing", "consumer", ["orders"]),
                               ("stranger", "producer", ["other"])):
        st, b = api.call("POST", "/v1/clients", body={"name": name, "role": role, "topics": topics})
        assert st == 201, b
    creds = {n: api.call("POST", f"/v1/clients/{n}/sqs-credentials")[1] for n in ("shop", "billing", "stranger")}
    shop, billing, stranger = (_sqs(creds[n]["access_key_id"], creds[n]["secret_access_key"])
                               for n in ("shop", "billing", "stranger"))
    assert shop.send_message(QueueUrl=url, MessageBody="order 1")["MessageId"]
    assert _code(lambda: shop.receive_message(QueueUrl=url))[0] == "AccessDenied"
    assert _code(lambda: shop.create_queue(QueueName="mine"))[0] == "AccessDenied"
    assert _code(lambda: stranger.send_message(QueueUrl=url, MessageBody="x"))[0] == "AccessDenied"
    got = billing.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert [m["Body"] for m in got] == ["order 1"]
    billing.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert _code(lambda: billing.send_message(QueueUrl=url, MessageBody="x"))[0] == "AccessDenied"
    # and the signature is really checked on this path
    bad = _sqs(creds["shop"]["access_key_id"], creds["shop"]["secret_access_key"] + "x")
    assert _code(lambda: bad.send_message(QueueUrl=url, MessageBody="x")) == ("SignatureDoesNotMatch", 403)
    assert api.call("DELETE", f"/v1/clients/shop/sqs-credentials/{creds['shop']['access_key_id']}")[0] == 204
    assert _code(lambda: shop.send_message(QueueUrl=url, MessageBody="x")) == ("InvalidClientTokenId", 403)


def test_the_function_url_event_is_served_like_the_gateway_route(api, client_key):
    """Issue 16 item 4: ``SqsFunction`` is also behind a Lambda function URL (template.yaml
    ``FunctionUrlConfig``). Its event (``events/sqs_function_url.json``: ``routeKey`` ``$default``,
    no ``pathParameters``, the URL's own host) re-signed with a live credential is authenticated and
    answered by the same handler, with queue URLs on the function URL's host; the sample's stale
    signature is refused."""
    from tests.handlers import Context, load_function, sample

    assert "FunctionUrlConfig" in tpl.load_template()["Resources"]["SqsFunction"]["Properties"]
    b = api.call("POST", "/v1/clients/worker/sqs-credentials")[1]
    fn = load_function("SqsFunction")
    event = sample("sqs_function_url.json")
    host = event["headers"]["host"]
    stale = fn(event, Context())
    assert stale["statusCode"] in (400, 403) and "Signature" in stale["body"], stale  # expired or wrong
    sqs_keys._master = None
    body = json.dumps({"QueueNamePrefix": "jo"}).encode()
    _, _, _, headers, _ = signed(b["access_key_id"], b["secret_access_key"], body=body, url=f"https://{host}/")
    event["headers"] = {**event["headers"], **headers, "host": host}  # signed for the URL's host
    event["body"] = body.decode()
    out = fn(event, Context())
    assert out["statusCode"] == 200, out
    urls = json.loads(out["body"])["QueueUrls"]
    assert urls and all(u.startswith(f"https://{host}/") for u in urls), urls
