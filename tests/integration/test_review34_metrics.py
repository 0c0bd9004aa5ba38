"""Review 34 (issue 34, adversarial): what a tenant's key can do to the metrics and the alarms."""
from __future__ import annotations

import pytest

from lakeq.common import metric_names as M
from tests.emf import documents, problems
from tests.history import path
from tests.integration.test_metrics import counted_by, produce

T = "quotes"


def pulled(api, key, n=2):
    produce(api, key["feed"], [{"body": f"b{i}", "key": "k"} for i in range(n)])
    s, b = api.call("GET", path(T), query={"group": "risk", "max": 10}, key=key["risk"])
    assert s == 200 and len(b["messages"]) == n, b
    return b


def test_a_batch_ack_entrys_own_group_field_names_no_metric_row(api, setup, clock, capsys):
    """A batch ack's entries act for the envelope's group (validation.ack_batch ignores an entry's
    ``group``), but the counters' row was taken from the entry's raw ``group``: any string a consumer
    key writes there became a ``Group`` dimension value, one new CloudWatch metric (and one EMF line)
    per entry, up to 100 a request, for ever new names."""
    b = pulled(api, setup)
    offs = [m["offset"] for m in b["messages"]]
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [
        {"receipt": b["receipt"], "accept": [o], "group": f"made-up-{i}"} for i, o in enumerate(offs)]},
        key=setup["risk"])
    assert s == 200 and all("error" not in r for r in out["results"]), out
    c = counted_by(capsys.readouterr().out)
    groups = {dict(dims).get("Group") for dims, _ in c} - {None}
    assert groups == {"risk"}, groups
    assert c[((("Topic", T), ("Group", "risk"))), M.ACKS] == len(offs)


@pytest.mark.parametrize("junk", [{"a": 1}, ["x"], "x" * 2000, "line\nbreak\"quote"])
def test_a_batch_ack_entrys_junk_group_field_is_harmless(api, setup, clock, capsys, junk):
    """The same field holding JSON that is not a name: a dict or a list made the route's counting raise
    (unhashable) after the ack had settled (a 500 for a settled ack, the client retries); a long or
    unprintable string went out as a dimension value CloudWatch refuses (> 1024 chars / control
    characters), and with one row it rode the invocation's own EMF line, dropping the deployment's
    counters of that invocation with it."""
    b = pulled(api, setup, n=1)
    capsys.readouterr()
    s, out = api.call("POST", "/v1/acks", {"group": "risk", "acks": [{"receipt": b["receipt"], "group": junk}]},
                      key=setup["risk"])
    assert s == 200 and "error" not in out["results"][0], out
    for d in documents(capsys.readouterr().out):
        assert problems(d) == [], d
