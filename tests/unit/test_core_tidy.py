"""Issue 10 part 4: the tidy core's structural rules (one error family, no import cycles, pure
planning modules, one name rule, report keys defined once)."""
from __future__ import annotations

import ast
import pathlib

import pytest

from lakeq.common import errors, names
from lakeq.log import receipts
from lakeq.rebalance import state as g


@pytest.mark.parametrize("cls,status,code", [(g.GroupBadRequest, 400, "bad_request"),
                                             (g.UnknownMember, 404, "unknown_member"),
                                             (g.StaleGeneration, 409, "stale_generation")])
def test_group_errors_are_api_errors_and_keep_state(cls, status, code):
    st = g.new_group("risk")
    e = cls("nope", state=st)
    assert isinstance(e, errors.ApiError) and isinstance(e, g.GroupError)
    assert (e.status, e.code, e.state) == (status, code, st)
    assert e.body() == {"error": {"code": code, "message": "nope"}}
    assert cls("x").state is None


# --------------------------------------------------------------------------------- import graph

CORE = pathlib.Path(__file__).resolve().parents[2] / "layers" / "core" / "lakeq"


def _imports(path: pathlib.Path) -> set[str]:
    """The lakeq modules ``path`` imports, lazily (inside functions) or not."""
    pkg = "lakeq" + ("." + path.parent.name if path.parent != CORE else "")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                mod = base + ("." + node.module if node.module else "")
            else:
                mod = node.module or ""
            if not mod.startswith("lakeq"):
                continue
            subs = {n for n in (mod + "." + a.name for a in node.names) if _module_path(n)}
            out.update(subs or {mod})
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("lakeq"))
    return {m for m in out if _module_path(m)} - {_name(path)}


def _module_path(mod: str) -> pathlib.Path | None:
    rel = mod.split(".")[1:]
    p = CORE.joinpath(*rel).with_suffix(".py") if rel else CORE / "__init__.py"
    return p if p.exists() else None


def _name(path: pathlib.Path) -> str:
    rel = path.relative_to(CORE).with_suffix("")
    return ".".join(["lakeq", *rel.parts]) if rel.name != "__init__" else "lakeq"


def _graph() -> dict[str, set[str]]:
    return {_name(p): _imports(p) for p in CORE.rglob("*.py")}


def _reaches(graph, a: str, b: str) -> bool:
    seen, todo = set(), [a]
    while todo:
        m = todo.pop()
        for n in graph.get(m, ()):
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return False


def test_service_and_subscriptions_do_not_import_each_other():
    graph = _graph()
    assert "lakeq.admin.auth" in graph["lakeq.consume.service"] and "lakeq.admin.auth" in graph["lakeq.subscriptions.service"]
    assert not _reaches(graph, "lakeq.consume.service", "lakeq.subscriptions.service")
    assert not _reaches(graph, "lakeq.subscriptions.service", "lakeq.consume.service")


def test_no_import_cycles_in_the_core():
    graph = _graph()
    cycles = sorted(m for m in graph if _reaches(graph, m, m))
    assert cycles == []


# ------------------------------------------------------------------------------- pure planning
PURE = ["lakeq.log.produce_plan", "lakeq.log.fanout_plan", "lakeq.common.names", "lakeq.common.clock", "lakeq.common.errors", "lakeq.rebalance.state",
        "lakeq.log.segments", "lakeq.log.selection", "lakeq.log.receipts", "lakeq.common.payload", "lakeq.contract.validation"]


@pytest.mark.parametrize("mod", PURE)
def test_planning_modules_import_no_aws(mod):
    """Neither the module nor any lakeq module it imports reaches boto3 / botocore / pynamodb."""
    graph = _graph()
    todo, seen = [mod], {mod}
    while todo:
        m = todo.pop()
        tree = ast.parse(_module_path(m).read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not any(n.split(".")[0] in {"boto3", "botocore", "pynamodb"} for n in names), (mod, m, names)
        for n in graph[m] - seen:
            seen.add(n)
            todo.append(n)


def _segment_record(topic: str, q: int, bodies: list[str], tags: list[list[str]]) -> dict:
    import base64

    from lakeq.log import segments as seg
    s = seg.encode([seg.Message(id=f"m{i}", body=b, tags=t, properties={"n": i}, produced_at=5)
                    for i, (b, t) in enumerate(zip(bodies, tags))], 10)
    img = {"pq": {"S": f"{topic}#{q}"}, "base": {"N": str(s.base)}, "count": {"N": str(s.count)},
           "idx": {"B": base64.b64encode(s.idx).decode()}, "data": {"B": base64.b64encode(s.data).decode()},
           "z": {"BOOL": s.compressed}}
    return {"eventName": "INSERT", "dynamodb": {"NewImage": img, "SequenceNumber": "1"}}


class _TagMatcher:
    """A stand-in index: subscription ``sub-<tag>`` matches messages carrying ``<tag>``."""

    def match(self, topic, msg, queue=0):
        return [f"sub-{t}" for t in msg.get("tags") or ()]


def test_fanout_plan_groups_per_subscription_and_source_segment_without_aws():
    from lakeq.log import fanout_plan as fp
    recs = [_segment_record("quotes", 2, ["a", "b", "c"], [["A"], ["B"], ["A", "B"]]),
            {"eventName": "REMOVE"},
            _segment_record("~sub", 0, ["x"], [["A"]])]  # list segments never fan out again
    p = fp.plan(recs, _TagMatcher())
    assert p.poison is None and p.queues == {"quotes#2": [(0, 10)]}
    assert {sid: [(g.key, g.record, [m.source_offset for m in g.messages]) for g in gs]
            for sid, gs in p.pending.items()} == {"sub-A": [("quotes@2:10", 0, [10, 12])],
                                                  "sub-B": [("quotes@2:10", 0, [11, 12])]}
    assert fp._source_pq("quotes@2:10") == "quotes#2" and fp._source_base("quotes@2:10") == 10


def test_fanout_plan_stops_at_a_poison_record():
    from lakeq.log import fanout_plan as fp
    bad = {"eventName": "INSERT", "dynamodb": {"NewImage": {"pq": {"S": "t#0"}}}}
    p = fp.plan([_segment_record("t", 0, ["a"], [["A"]]), bad, _segment_record("t", 0, ["b"], [["A"]])],
                _TagMatcher())
    assert p.poison == 1 and [g.record for g in p.pending["sub-A"]] == [0] and "KeyError" in p.error


def test_parked_view_is_pure():
    from lakeq.log.fanout_plan import parked_view
    assert parked_view('{"t/a#3": {"from": 7, "reason": "r", "since": 1, "attempts": 2}}') == [
        {"topic": "t/a", "queue": 3, "from_offset": 7, "reason": "r", "since": 1, "attempts": 2}]
    assert parked_view("not json") == [] and parked_view(None) == []


# --------------------------------------------------------------------------------- one name rule

BAD_NAMES = ["", "a\n", "a b", "é", "a/b", "x" * 201, "a\x00"]
BAD_TOPICS = ["", "a\n", "/a", "a/", "a//b", "a b", "x" * 201]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_group_member_ids_follow_the_name_rule(bad):
    assert not names.is_name(bad)
    with pytest.raises(g.GroupBadRequest):
        g._check_member_id(bad)


@pytest.mark.parametrize("bad", BAD_TOPICS)
def test_group_topics_follow_the_topic_rule(bad):
    assert not names.is_topic(bad)
    with pytest.raises(g.GroupBadRequest):
        g._check_topics([bad])
    with pytest.raises(g.GroupBadRequest):
        g._check_queues([{"topic": bad, "queue": 0}])


@pytest.mark.parametrize("bad", BAD_TOPICS[1:])
def test_receipt_topics_follow_the_topic_rule(bad):
    with pytest.raises(errors.BadRequest):
        receipts.parse(f"lakeq:{bad}@0:0:1:5")


@pytest.mark.parametrize("bad", BAD_NAMES[1:])
def test_receipt_subscription_ids_follow_the_name_rule(bad):
    with pytest.raises(errors.BadRequest):
        receipts.parse(f"lakeq:~{bad}:0:1:5")


def test_the_name_rule_accepts_what_api_md_allows():
    assert receipts.parse("lakeq:quotes/sh@3:0:1:5").topic_queue == ("quotes/sh", 3)
    assert g._check_member_id("m-1._x") == "m-1._x" and g._check_topics(["a/b.c"]) == ["a/b.c"]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_ack_subscription_ids_follow_the_name_rule(bad):
    from lakeq.contract import validation as v
    with pytest.raises(errors.BadRequest):
        v.ack({"subscription": bad, "receipt": "r"})


# ------------------------------------------------------------------- report keys, Glue bootstrap
GLUE = CORE.parents[2] / "glue_jobs"


def test_report_keys_are_defined_once_and_imported_by_the_jobs():
    """The API and the Glue jobs use the same functions (no copy that could drift)."""
    from lakeq.lake import report_keys, reports
    jobs_src = (GLUE / "lakeq_lake" / "jobs.py").read_text()
    assert "from lakeq.lake.report_keys import" in jobs_src and "def summary_key" not in jobs_src
    assert "def plan_key" not in jobs_src and '"reports/' not in jobs_src
    assert reports.summary_key is report_keys.summary_key and reports.plan_key is report_keys.plan_key
    for py in [*GLUE.glob("*.py"), *(GLUE / "lakeq_lake").glob("*.py"), *CORE.glob("*.py")]:
        if py.name != "report_keys.py":
            assert "/latest/group=" not in py.read_text(), py


def test_one_glue_bootstrap():
    for job in ("backlog.py", "rebalance_plan.py"):
        src = (GLUE / job).read_text()
        assert "def _local_paths" not in src and "SparkSession.builder" not in src, job
        assert "local_paths()" in src and "session(" in src, job
