"""Issue 34: one table of the CloudWatch metrics lakeq emits (lakeq.common.metric_names). Every
name an emitter uses is in it, every name in it is emitted, and template.yaml's alarms and dashboard
watch only names in it (an alarm on a metric nobody emits never fires); the Lambda and DynamoDB
queries name every function and table of the template."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from infra.local import template as tpl
from lakeq.common import metric_names as M
from tests.emf import UNITS

ROOT = Path(__file__).resolve().parents[2]
CODE = [*sorted((ROOT / "layers" / "core" / "lakeq").rglob("*.py")), *sorted((ROOT / "functions").rglob("*.py"))]
TABLE = ROOT / "layers" / "core" / "lakeq" / "common" / "metric_names.py"


def emitted_names(sources: dict[str, str]) -> dict[str, set[str]]:
    """name -> the files that use it: ``M.<CONSTANT>`` anywhere (the table's own module apart) and
    the string literal of an ``add_metric(name=…)``. Unknown constants and literals are kept as
    ``?<text>`` so the test names them."""
    out: dict[str, set[str]] = {}
    for path, src in sources.items():
        table = "metric_names as M" in src  # elsewhere M may be another module (the models)
        for node in ast.walk(ast.parse(src)):
            name = None
            if table and isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "M":
                name = getattr(M, node.attr, None)
                name = None if isinstance(name, tuple) else name if isinstance(name, str) else f"?M.{node.attr}"
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_metric":
                for kw in node.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        name = kw.value.value if kw.value.value in M.ALL else f"?{kw.value.value}"
            if name is not None:
                out.setdefault(name, set()).add(path)
    return out


def code_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in CODE if p != TABLE}


def test_every_emitted_name_is_in_the_table_and_every_table_name_is_emitted():
    used = emitted_names(code_sources())
    unknown = {n: sorted(f) for n, f in used.items() if n.startswith("?")}
    assert unknown == {}
    assert set(used) == set(M.ALL), sorted(set(M.ALL) - set(used))
    assert set(M.UNITS.values()) <= UNITS


def test_the_scan_sees_a_literal_outside_the_table():
    src = ('from lakeq.common import metric_names as M\n'
           'metrics.add_metric(name="MessagesProduced", unit="Count", value=1)\nx = M.SENT\ny = M.NOPE\n')
    assert set(emitted_names({"f.py": src})) == {"?MessagesProduced", M.SENT, "?M.NOPE"}


def _sub(value) -> str:
    """A ``Fn::Sub`` string with each ``${X}`` replaced by ``X`` (enough to read names out of it)."""
    if isinstance(value, dict) and "Fn::Sub" in value:
        v = value["Fn::Sub"]
        v = v[0] if isinstance(v, list) else v
        return re.sub(r"\$\{([^}]+)\}", r"\1", v)
    return value


# the stack's namespace and service (template.yaml's Globals), as _sub spells them
NAMESPACE = "lakeq/AWS::StackName"
SERVICE = "AWS::StackName"
LAKEQ_QUERY = re.compile(r'SELECT \w+\((\w+)\) FROM (?:SCHEMA\()?"?lakeq/AWS::StackName"?[,) ]')
ANY_QUERY = re.compile(r'SELECT \w+\((\w+)\) FROM (?:SCHEMA\()?"?([^",) ]+)"?[,) ]')


def _ref(value):
    """A ``Ref`` of a pseudo parameter or a ``Fn::Sub`` as :func:`_sub` spells it; anything else as is."""
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    return _sub(value)


def watched(template: dict) -> dict[str, list[str]]:
    """resource -> the lakeq-namespace metric names its alarm or dashboard watches (the namespace
    is the stack's, ``lakeq/${AWS::StackName}``)."""
    out: dict[str, list[str]] = {}
    for lid, r in template["Resources"].items():
        props = r.get("Properties") or {}
        names: list[str] = []
        if r["Type"] == "AWS::CloudWatch::Alarm":
            if _ref(props.get("Namespace")) == NAMESPACE:
                names.append(props["MetricName"])
            for q in props.get("Metrics") or []:
                metric = (q.get("MetricStat") or {}).get("Metric") or {}
                if _ref(metric.get("Namespace")) == NAMESPACE:
                    names.append(metric["MetricName"])
                names += LAKEQ_QUERY.findall(_sub(q.get("Expression", "")))
        elif r["Type"] == "AWS::CloudWatch::Dashboard":
            body = json.loads(_sub(props["DashboardBody"]))
            for w in body["widgets"]:
                for line in w["properties"].get("metrics", []):
                    if line and line[0] == NAMESPACE:
                        names.append(line[1])
                    elif line and isinstance(line[0], dict):
                        names += LAKEQ_QUERY.findall(line[0].get("expression", ""))
        if names:
            out[lid] = names
    return out


def namespaces_and_services(template: dict) -> tuple[set, set]:
    """Every namespace and every ``service`` dimension value the alarms and the dashboard name
    (apart from AWS's own, ``AWS/…``)."""
    spaces, services = set(), set()
    for r in template["Resources"].values():
        props = r.get("Properties") or {}
        if r["Type"] == "AWS::CloudWatch::Alarm":
            stats = [props, *[(q.get("MetricStat") or {}).get("Metric") or {} for q in props.get("Metrics") or []]]
            for m in stats:
                if m.get("Namespace") is not None:
                    spaces.add(_ref(m["Namespace"]))
                services |= {_ref(d["Value"]) for d in m.get("Dimensions") or [] if d["Name"] == "service"}
            for q in props.get("Metrics") or []:
                spaces |= {ns for _, ns in ANY_QUERY.findall(_sub(q.get("Expression", "")))}
        elif r["Type"] == "AWS::CloudWatch::Dashboard":
            body = json.loads(_sub(props["DashboardBody"]))
            for w in body["widgets"]:
                for line in w["properties"].get("metrics", []):
                    if line and isinstance(line[0], str) and line[0] != "...":
                        spaces.add(line[0])
                        services |= {line[i + 1] for i in range(2, len(line) - 1, 2) if line[i] == "service"}
                    elif line and isinstance(line[0], dict):
                        spaces |= {ns for _, ns in ANY_QUERY.findall(line[0].get("expression", ""))}
    return {s for s in spaces if not s.startswith("AWS/")}, services


@pytest.fixture(scope="module")
def template():
    return tpl.load_template()


def test_alarms_and_dashboard_watch_only_emitted_metrics(template):
    seen = watched(template)
    assert {"DeadLetteredAlarm", "OldestMessageAgeAlarm", "BacklogGrowingAlarm", "PushEndpointFailingAlarm",
            "MetricsTruncatedAlarm", "OperationsDashboard"} <= set(seen)
    bad = {lid: [n for n in names if n not in M.ALL] for lid, names in seen.items()}
    assert {lid: n for lid, n in bad.items() if n} == {}
    board = set(seen["OperationsDashboard"])
    assert {M.SENT, M.RECEIVED, M.VISIBLE, M.AGE, M.DEAD_LETTERED, M.BACKLOG} <= board


def test_every_alarm_and_the_dashboard_use_the_stacks_namespace_and_service(template):
    """Review of issue 34 item 2: two stacks in one account shared the ``lakeq`` namespace and
    service, so each one's alarms and dashboard watched the sum of both. The namespace and service
    come from the stack's name in one place (Globals' POWERTOOLS_*), and every alarm and widget
    names the same two expressions (a literal ``lakeq`` left anywhere fails here)."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert (_ref(env["POWERTOOLS_METRICS_NAMESPACE"]), _ref(env["POWERTOOLS_SERVICE_NAME"])) == (NAMESPACE, SERVICE)
    assert namespaces_and_services(template) == ({NAMESPACE}, {SERVICE})


def test_the_namespace_check_sees_a_literal(template):
    alarm = json.loads(json.dumps(template["Resources"]["MetricsTruncatedAlarm"]))
    alarm["Properties"]["Namespace"] = "lakeq"
    alarm["Properties"]["Dimensions"][0]["Value"] = "lakeq"
    assert namespaces_and_services({"Resources": {"A": alarm}}) == ({"lakeq"}, {"lakeq"})


def test_the_check_reports_a_name_nobody_emits(template):
    alarm = json.loads(json.dumps(template["Resources"]["OldestMessageAgeAlarm"]))
    alarm["Properties"]["MetricName"] = "ApproximateAgeOfOldestMesage"
    board = json.loads(json.dumps(template["Resources"]["OperationsDashboard"]))
    body = board["Properties"]["DashboardBody"]["Fn::Sub"].replace("SELECT MAX(ApproximateNumberOfMessagesBacklog)",
                                                                   "SELECT MAX(Backlog)")
    board["Properties"]["DashboardBody"]["Fn::Sub"] = body
    seen = watched({"Resources": {"A": alarm, "D": board}})
    assert "ApproximateAgeOfOldestMesage" in seen["A"] and "Backlog" in seen["D"]


def test_function_and_table_queries_name_every_function_and_table(template):
    res = template["Resources"]
    functions = {lid for lid, r in res.items() if r["Type"] == "AWS::Serverless::Function"}
    tables = {lid for lid, r in res.items() if r["Type"] == "AWS::DynamoDB::Table"}
    for alarm in ("FunctionErrorsAlarm", "FunctionThrottlesAlarm"):
        (q,) = res[alarm]["Properties"]["Metrics"]
        assert set(re.findall(r"FunctionName = '\$\{(\w+)\}'", q["Expression"]["Fn::Sub"])) == functions, alarm
    body = res["OperationsDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert set(re.findall(r"FunctionName = '\$\{(\w+)\}'", body)) == functions
    assert set(re.findall(r"TableName = '\$\{(\w+)\}'", body)) == tables


def stream_fed(template: dict) -> set[str]:
    """The functions a DynamoDB stream triggers (their Events of Type DynamoDB)."""
    return {lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
            and any(e.get("Type") == "DynamoDB" for e in (r["Properties"].get("Events") or {}).values())}


def test_the_stream_lag_alarm_names_every_stream_fed_function(template):
    """The head mover more than 10 s behind its stream breaks the pull's assumption (design.md "Why
    nothing is missed": hints settle within HEADS_SETTLE_MS, else a quiet queue waits for the 60-s
    probe): StreamConsumersBehindAlarm watches IteratorAge over every stream-fed function whose
    batching window is shorter than that (the archiver's 60 s: ArchiveBehindAlarm, below)."""
    from lakeq.consume.reader import HEADS_SETTLE_MS

    fed = {f for f, w in batching_windows_ms(template).items() if w < HEADS_SETTLE_MS}
    assert "HeadsFunction" in fed and len(fed) >= 5, fed
    props = template["Resources"]["StreamConsumersBehindAlarm"]["Properties"]
    (q,) = props["Metrics"]
    assert "MAX(IteratorAge)" in q["Expression"]["Fn::Sub"]
    assert set(re.findall(r"FunctionName = '\$\{(\w+)\}'", q["Expression"]["Fn::Sub"])) == fed
    assert props["Threshold"] == HEADS_SETTLE_MS and props["ComparisonOperator"] == "GreaterThanThreshold"


def batching_windows_ms(template: dict) -> dict[str, int]:
    """Each stream-fed function's largest MaximumBatchingWindowInSeconds over its DynamoDB events, in ms."""
    out = {}
    for lid in stream_fed(template):
        events = template["Resources"][lid]["Properties"]["Events"].values()
        out[lid] = max(int(e["Properties"].get("MaximumBatchingWindowInSeconds", 0)) * 1000
                       for e in events if e.get("Type") == "DynamoDB")
    return out


def test_no_stream_lag_alarm_fires_on_a_batching_window(template):
    """IteratorAge is the age of a batch's last record when the function gets the batch: a function
    that gathers records for a window of W s shows up to W s on a quiet stream (one ack, one produce,
    then the window), every time, healthy. Each stream-lag alarm's threshold clears the windows of
    the functions it watches (review_a: the archiver's 60-s window was under the 10-s alarm, which then
    paged on any quiet hour's first ack); every stream-fed function is under one of them, and the
    head mover's under HEADS_SETTLE_MS."""
    from lakeq.consume.reader import HEADS_SETTLE_MS

    windows = batching_windows_ms(template)
    watched = {}
    for lid, r in template["Resources"].items():
        if r["Type"] != "AWS::CloudWatch::Alarm":
            continue
        for m in r["Properties"].get("Metrics") or []:
            expr = (m.get("Expression") or {}).get("Fn::Sub", "") if isinstance(m.get("Expression"), dict) else ""
            if "IteratorAge" in expr:
                for fn in re.findall(r"FunctionName = '\$\{(\w+)\}'", expr):
                    watched[fn] = (lid, r["Properties"]["Threshold"])
    assert set(watched) == set(windows), (watched, windows)
    for fn, (alarm, threshold) in watched.items():
        assert threshold > windows[fn], (fn, alarm, threshold, windows[fn])
    assert watched["HeadsFunction"][1] == HEADS_SETTLE_MS
