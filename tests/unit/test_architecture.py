"""Issue 15: the core's packages and who may import whom.

The allowed imports are the table in docs/architecture.md ("Who may import whom", between the
``allowed-imports`` markers); this test reads it, so the page and the rule cannot drift apart.
Every import of every module counts, lazy ones (inside functions) included."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORE = ROOT / "layers" / "core" / "lakeq"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
AWS = {"boto3", "botocore", "pynamodb"}


def table(text: str | None = None) -> dict[str, tuple[bool, set[str]]]:
    """package -> (pure, the core packages it may import), from architecture.md's table."""
    text = ARCHITECTURE.read_text() if text is None else text
    body = text.split("<!-- allowed-imports: begin -->")[1].split("<!-- allowed-imports: end -->")[0]
    out = {}
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        pkg = cells[0].strip("`")
        may = set() if cells[2] in ("—", "-", "") else {p.strip() for p in cells[2].split(",")}
        out[pkg] = (cells[1] == "yes", may)
    return out


def imports(source: str) -> set[str]:
    """Every module name ``source`` imports (absolute imports; the core uses no relative ones)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in the core: use the full module path"
            out.add(node.module or "")
            out.update(f"{node.module}.{a.name}" for a in node.names if node.module == "lakeq")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def violations(pkg: str, module: str, source: str, rules: dict[str, tuple[bool, set[str]]]) -> list[str]:
    """What ``module`` of ``pkg`` imports that the rules forbid (empty when it keeps to them)."""
    pure, may = rules[pkg]
    bad = []
    for name in sorted(imports(source)):
        parts = name.split(".")
        if parts[0] == "lakeq" and len(parts) > 1 and parts[1] != pkg and parts[1] != "exports":
            if parts[1] not in may:
                bad.append(f"{module} imports {name}: {pkg} may not import {parts[1]}")
        elif parts[0] in AWS:
            if pure:
                bad.append(f"{module} imports {name}: {pkg} is pure")
            elif parts[0] == "pynamodb" and pkg != "store":
                bad.append(f"{module} imports {name}: only store imports pynamodb")
    if pkg != "store" and re.search(r"""(client|resource)\(\s*["']dynamodb["']""", source):
        bad.append(f"{module} makes a DynamoDB client: only store talks to DynamoDB")
    return bad


def modules():
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE)
        if len(rel.parts) > 1:
            yield rel.parts[0], ".".join(("lakeq", *rel.with_suffix("").parts)), path


def test_every_package_is_in_the_table_and_the_table_has_no_other():
    pkgs = {p.name for p in CORE.iterdir() if (p / "__init__.py").is_file()}
    assert pkgs == set(table())
    for pkg, (_, may) in table().items():
        assert may <= set(table()), (pkg, may - set(table()))
    # nothing but the package helper at the top: every module belongs to a concern
    assert sorted(p.name for p in CORE.glob("*.py")) == ["__init__.py"]


def test_no_module_imports_what_its_package_may_not():
    rules = table()
    bad = [v for pkg, mod, path in modules() for v in violations(pkg, mod, path.read_text(), rules)]
    assert bad == []


def test_the_allowed_imports_have_no_cycle_and_pure_packages_import_only_pure_ones():
    rules = table()

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in rules[a][1])
    assert [p for p in rules if reaches(p, p)] == []
    for pkg, (pure, may) in rules.items():
        if pure:
            assert all(rules[m][0] for m in may), pkg
    assert "store" not in rules["api"][1]


def test_the_checker_catches_what_it_should():
    """The rules above can fail: forbidden imports written in each way are reported."""
    rules = table()
    assert violations("api", "lakeq.api.x", "from lakeq.store.queue_log import LogRepo", rules)
    assert violations("api", "lakeq.api.x", "def f():\n    from lakeq.store import queue_log\n", rules)
    assert violations("log", "lakeq.log.x", "import pynamodb.models", rules)
    assert violations("log", "lakeq.log.x", "import boto3", rules)
    assert violations("admin", "lakeq.admin.x", "from pynamodb.exceptions import DoesNotExist", rules)
    assert violations("lake", "lakeq.lake.x", "import boto3\nboto3.client('dynamodb')", rules)
    assert violations("fanout", "lakeq.fanout.x", "from lakeq import subscriptions", rules)
    assert not violations("lake", "lakeq.lake.x", "import boto3\nboto3.client('s3')", rules)
    assert not violations("api", "lakeq.api.x", "from lakeq.consume import service", rules)
    with pytest.raises(AssertionError):
        imports("from .queue_log import LogRepo")
    cyclic = table("<!-- allowed-imports: begin -->\n| p | pure | may | what |\n|---|---|---|---|\n"
                   "| `a` | no | b | |\n| `b` | no | a | |\n<!-- allowed-imports: end -->")
    assert cyclic == {"a": (False, {"b"}), "b": (False, {"a"})}


def test_every_package_names_its_public_api_and_each_name_resolves():
    import importlib
    for pkg in table():
        mod = importlib.import_module(f"lakeq.{pkg}")
        assert mod.__doc__, pkg
        # a name equal to a submodule's would shadow it: `from lakeq.<pkg> import <module>` breaks
        submodules = {p.stem for p in (CORE / pkg).glob("*.py")}
        assert not set(getattr(mod, "__all__", ())) & submodules, pkg
        for name in getattr(mod, "__all__", ()):
            assert getattr(mod, name) is not None, (pkg, name)


# --------------------------------------------------------------- what each function loads (issue 15.4)
FUNCTIONS = ROOT / "functions"
# stream- and schedule-triggered functions: none of the HTTP use cases, no powertools event handler
BACKGROUND = ["archiver", "fanout", "groupssweep", "notify", "promoter", "push", "unsubscribe"]


def loaded_modules(function: str) -> set[str]:
    """The modules ``functions/<function>/app.py`` loads, imported in a fresh interpreter."""
    import json
    import os
    import subprocess
    import sys
    app = FUNCTIONS / function / "app.py"
    code = ("import importlib.util as u, json, sys\n"
            f"sys.path[:0] = [{str(app.parent)!r}, {str(ROOT / 'layers/core')!r}, {str(ROOT / 'layers/matcher')!r}]\n"
            f"s = u.spec_from_file_location('app', {str(app)!r}); m = u.module_from_spec(s); s.loader.exec_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_SERVICE_NAME": "t",
           "POWERTOOLS_METRICS_NAMESPACE": "t"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return set(json.loads(out.stdout))


def http_use_cases(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.startswith("lakeq.") and (
        m.endswith(".service") or m.startswith("lakeq.api.") or m in ("lakeq.lake.reports", "lakeq.console.monitor")))


@pytest.mark.parametrize("function", BACKGROUND)
def test_background_functions_load_no_http_use_case(function):
    mods = loaded_modules(function)
    assert http_use_cases(mods) == []
    assert "aws_lambda_powertools.event_handler" not in mods


def test_the_http_functions_load_their_own_use_cases_only():
    assert http_use_cases(loaded_modules("produce")) == ["lakeq.api.http", "lakeq.api.produce",
                                                         "lakeq.produce.service"]
    assert "lakeq.consume.service" not in loaded_modules("groups")
    assert "lakeq.subscriptions.service" in loaded_modules("consume")  # the ack route settles lists too
    archiver = loaded_modules("archiver")  # the lake bucket through store.lake: no table model, no pynamodb
    assert "pynamodb" not in archiver
    assert {m for m in archiver if m.startswith("lakeq.store")} == {"lakeq.store", "lakeq.store.clients",
                                                                     "lakeq.store.lake"}


# --------------------------------------------------------------- cold start (issue 16 item 5)
# What no function loads at import: boto3 (its session also loads s3transfer, which it injects into
# every S3 client; lakeq makes its S3 / Secrets Manager / API Gateway clients with botocore
# directly), and the subscription matcher's index outside the one function that matches messages
# (the segment codec needs only matcher.bitmap; creating a subscription imports the index on use).
ALL_FUNCTIONS = sorted(p.parent.name for p in FUNCTIONS.glob("*/app.py"))
NOT_AT_IMPORT = {"boto3", "s3transfer", "matcher.index"}
NEEDS_AT_IMPORT = {"fanout": {"matcher.index"}}


@pytest.mark.parametrize("function", ALL_FUNCTIONS)
def test_cold_start_leaves_out_what_the_function_does_not_need(function):
    mods = loaded_modules(function)
    unwanted = NOT_AT_IMPORT - NEEDS_AT_IMPORT.get(function, set())
    assert sorted(unwanted & mods) == []
    assert NEEDS_AT_IMPORT.get(function, set()) <= mods  # the list above is not stale


def test_no_function_or_core_module_imports_boto3_even_lazily():
    """Lazy imports too (a client made on first use still pays boto3's import in the first
    invocation): botocore's ``session.get_session().create_client`` makes the same clients."""
    sources = [*(p for _, _, p in modules()), *FUNCTIONS.glob("*/app.py"), CORE / "__init__.py"]
    assert len(sources) > 50
    bad = [str(p.relative_to(ROOT)) for p in sources if any(n.split(".")[0] in ("boto3", "s3transfer")
                                                             for n in imports(p.read_text()))]
    assert bad == []
    assert imports("def f():\n    import boto3\n") == {"boto3"}  # the checker sees a lazy import


def test_test_module_basenames_are_unique_across_the_suite():
    """pytest's default (rootdir) import mode imports each test file by its basename, so two
    ``test_x.py`` in different folders stop the whole suite at collection, while runs of one
    folder still pass (the CI failure of 2026-12-05: tests/unit and tests/integration both had
    ``test_review_issue30.py``)."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


# --------------------------------------------------------------- store calls only in store (issue 31.1)
# The import table above lets a use case import `store`, so it cannot see a DynamoDB call made
# through a model outside `store` (`QueueModel.scan(...)`, `KeyModel(...).save()`, a transaction
# built from model attributes; no model may be imported there either, `MODELS_ALLOWED` below). This
# check reads every module outside `store` and every function's app.py and reports:
# (a) a storage method called on a model (a `*Model` name imported from `lakeq.store…`, or
#     `models.XModel` through an imported module): a class method, or an instance method on a model
#     built in place (`KeyModel(...).save()`);
# (b) a condition or update action built from a model's attribute (`ClientModel.key_version == v`,
#     `QueueModel.next_due <= now`, `KeyModel.key_hash.does_not_exist()`): a request composed outside
#     the repository that sends it;
# (c) a write with pynamodb's `actions=` / `condition=` keywords, or the store's raw transaction
#     helpers (`transact`, `transact_if_first`, `update_if`) imported outside `store`;
# (d) a DynamoDB or S3 client or resource made outside `store` (boto3 or botocore:
#     `create_client("s3")`, `client("dynamodb")`, `resource("s3")`);
# (e) a record written back by itself (`record.save()`, a bare `record.delete()`: pynamodb's instance
#     writes, whatever the receiver's name; no other `.save` or argument-less `.delete` exists outside
#     `store`). Not seen: `record.refresh()` / `record.update()` on a record read from a repository
#     (no types; `Matcher.refresh()` and `dict.update()` share the names), unless it passes
#     pynamodb's `actions=` / `condition=` (c).
MODEL_CALLS = {"query", "scan", "get", "batch_get", "batch_write", "count", "exists", "create_table",
               "delete_table", "describe_table", "update_ttl", "save", "update", "delete", "refresh",
               "get_operation_kwargs_from_instance"}
INSTANCE_CALLS = {"save", "update", "delete", "refresh"}
RAW_WRITES = {"transact", "transact_if_first", "update_if", "_connection", "TransactWrite", "TransactGet",
              "Connection"}
STORAGE_SERVICES = {"dynamodb", "s3"}
# What may stay, and why (empty is the goal): path relative to the repository root -> reason.
STORE_CALLS_ALLOWED: dict[str, str] = {}


def store_calls(source: str) -> list[str]:
    """The storage calls (a)-(d) above that ``source`` makes, as ``line: what`` (empty when none)."""
    tree = ast.parse(source)
    models, modules_ = set(), set()  # names bound to models / to store modules holding models
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lakeq.store"):
            for a in node.names:
                name = a.asname or a.name
                if a.name.endswith("Model"):
                    models.add(name)
                elif a.name in RAW_WRITES:
                    bad.append(f"{node.lineno}: imports the store's raw write {a.name}")
                else:
                    modules_.add(name)  # a module (`from lakeq.store import models`) or a repo: harmless
        elif isinstance(node, ast.ImportFrom) and node.module == "lakeq":
            modules_.update(a.asname or a.name for a in node.names if a.name == "store")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("lakeq.store"):
                    modules_.add(a.asname or a.name.split(".")[0])

    def dotted(e) -> str:
        parts = []
        while isinstance(e, ast.Attribute):
            parts.append(e.attr)
            e = e.value
        return ".".join([e.id, *reversed(parts)]) if isinstance(e, ast.Name) else ""

    def is_model(e) -> bool:
        """``e`` names a model class: ``XModel`` imported from the store, or ``<store module>…XModel``."""
        if isinstance(e, ast.Name):
            return e.id in models
        d = dotted(e)
        return bool(d) and d.split(".")[0] in modules_ and d.rsplit(".", 1)[-1].endswith("Model")

    def model_attr(e) -> bool:
        return isinstance(e, ast.Attribute) and is_model(e.value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                if is_model(f.value) and f.attr in MODEL_CALLS:
                    bad.append(f"{node.lineno}: {dotted(f)}() calls the store through a model")
                elif isinstance(f.value, ast.Call) and is_model(f.value.func) and f.attr in INSTANCE_CALLS:
                    bad.append(f"{node.lineno}: {dotted(f.value.func)}(...).{f.attr}() calls the store through a model")
                elif model_attr(f.value):
                    bad.append(f"{node.lineno}: {dotted(f)}() builds a request from a model's attribute")
            kws = {k.arg for k in node.keywords}
            if isinstance(f, ast.Attribute) and (f.attr == "save" or (f.attr == "delete" and not node.args
                                                                       and not kws)):
                bad.append(f"{node.lineno}: .{f.attr}() writes a record back by itself")
            if kws & {"actions", "condition"}:
                bad.append(f"{node.lineno}: a write with pynamodb's {sorted(kws & {'actions', 'condition'})}")
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("client", "resource", "create_client"):
                service = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg == "service_name"), None)
                if isinstance(service, ast.Constant) and service.value in STORAGE_SERVICES:
                    bad.append(f"{node.lineno}: makes a {service.value} {name.replace('create_', '')}")
        elif isinstance(node, ast.Compare) and any(model_attr(e) for e in (node.left, *node.comparators)):
            bad.append(f"{node.lineno}: a condition built from a model's attribute")
    return sorted(set(bad), key=lambda s: int(s.split(":")[0]))


def outside_store():
    for _, mod, path in modules():
        if not mod.startswith("lakeq.store."):
            yield path
    yield from sorted(FUNCTIONS.rglob("*.py"))


def test_only_store_calls_dynamodb_or_s3():
    paths = list(outside_store())
    assert len(paths) > 80
    found = {str(p.relative_to(ROOT)): calls for p in paths if (calls := store_calls(p.read_text()))}
    assert {p: c for p, c in found.items() if p not in STORE_CALLS_ALLOWED} == {}
    assert set(STORE_CALLS_ALLOWED) <= set(found)  # the allow-list is not stale


def test_the_store_call_checker_catches_what_it_should():
    """Each way of reaching DynamoDB or S3 outside ``store`` is reported; a repository call is not."""
    m = "from lakeq.store.models import QueueModel, KeyModel\n"
    assert store_calls(m + "QueueModel.scan(QueueModel.next_due <= 5)")
    assert store_calls(m + "list(QueueModel.query('t#0'))")
    assert store_calls(m + "QueueModel.get('t#0', consistent_read=True)")
    assert store_calls(m + "KeyModel('h', client='c').save()")
    assert store_calls(m + "def f():\n    return KeyModel.key_hash.does_not_exist()\n")
    assert store_calls("from lakeq.store.models import SegmentModel as S\nS.query('p', S.base.between(1, 2))")
    assert store_calls("from lakeq.store import models\nmodels.ClientModel.scan()")
    assert store_calls("from lakeq.store import ClientModel\nClientModel.batch_get([])")
    assert store_calls("import lakeq.store.models\nlakeq.store.models.ClientModel.count()")
    assert store_calls("from lakeq.store.subscriptions import SubscriptionModel\nSubscriptionModel.scan()")
    assert store_calls("from lakeq.store.writes import transact\ntransact(lambda t: None)")
    assert store_calls("def b(t, c):\n    t.update(c, actions=[], condition=None)\n")
    assert store_calls("import botocore.session\nbotocore.session.get_session().create_client('s3')")
    assert store_calls("import boto3\nboto3.resource('dynamodb')")
    assert store_calls("import boto3\nboto3.client(service_name='s3')")
    assert store_calls("from lakeq.store.catalog import ClientRepo\nc = ClientRepo.get('c')\nc.save()")
    assert store_calls("def f(item):\n    item.delete()\n")
    assert not store_calls(m + "def f(q: QueueModel) -> int:\n    return int(q.max_offset)\n")
    assert not store_calls("from lakeq.store.catalog import ClientRepo\nClientRepo.all()\nClientRepo.get('c')")
    assert not store_calls("import botocore.session\nbotocore.session.get_session().create_client('glue')")
    assert not store_calls("d = {}\nd.update(a=1)\nm.refresh()\nx.get('k')\nrepo.delete('k')")


# --------------------------------------------------------------- auth is one middleware (issue 31 item 2)
# lakeq.api.http.make_app installs one middleware that authenticates every non-public route's caller
# and puts it in the request context; a route reads it as ``router.caller``. A route module that
# authenticates on its own (``principal(router)``, ``authenticate(...)``) or builds a plain powertools
# router (whose routes the middleware would not know) goes back to one check per route.
ROUTE_MODULES = sorted(p for p in (CORE / "api").glob("*.py") if p.name not in ("__init__.py", "http.py"))
OWN_AUTH = re.compile(r"\bprincipal\(|\bauthenticate\(|\bcheck_query\(|\bAPIGatewayHttpRouter\b")


def own_auth(source: str) -> list[str]:
    """The lines of a route module that authenticate, check the query or build a plain powertools
    router instead of ``lakeq.api.http.Router``."""
    return [line.strip() for line in source.splitlines() if OWN_AUTH.search(line)]


def test_route_modules_leave_authentication_to_the_middleware():
    assert len(ROUTE_MODULES) >= 10
    bad = {str(p.relative_to(ROOT)): own_auth(p.read_text()) for p in ROUTE_MODULES}
    assert {k: v for k, v in bad.items() if v} == {}
    apps = [p for p in FUNCTIONS.glob("*/app.py") if "make_app" in p.read_text()]
    assert len(apps) >= 9 and [str(p) for p in apps if own_auth(p.read_text())] == []
    # the checker sees what it should
    assert own_auth("    p = principal(router)\n") and own_auth("r = APIGatewayHttpRouter()\n")
    assert own_auth("    authenticate(h)\n") and not own_auth("router = Router()\n    p = router.caller\n")


# --------------------------------------------------------------- a schedule's entry (issue 31 item 2)
# The rule (docs/architecture.md, "A new schedule"): a scheduled function's lambda_handler calls an
# entry of its concern's package, never one in store/ or api/; the page's table says where each is.
ENTRY_OUTSIDE_ITS_CONCERN = {"GroupsSweepFunction": "store"}  # listed in architecture.md, not moved yet


def scheduled_functions() -> dict[str, pathlib.Path]:
    """logical id -> app.py of every function with a ``Schedule`` event in template.yaml."""
    from infra.local import template as tpl
    out = {}
    for lid, res in tpl.load_template()["Resources"].items():
        props = res.get("Properties") or {}
        if res.get("Type") == "AWS::Serverless::Function" and any(
                (ev or {}).get("Type") == "Schedule" for ev in (props.get("Events") or {}).values()):
            out[lid] = ROOT / props["CodeUri"] / "app.py"
    return out


def entry_packages(source: str) -> set[str]:
    """The core packages an app.py imports besides the HTTP glue (``api``) and ``common``."""
    return {n.split(".")[1] for n in imports(source)
            if n.startswith("lakeq.") and n.count(".") >= 1 and n.split(".")[1] not in ("api", "common")}


def imported(source: str) -> set[str]:
    """Every module or module attribute ``source`` imports by its full name (``from a import b`` → a, a.b)."""
    out = imports(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_a_schedules_entry_lives_in_its_concerns_package():
    functions = scheduled_functions()
    assert len(functions) >= 6
    outside = {lid: sorted(entry_packages(app.read_text()) & {"store", "api"}) for lid, app in functions.items()}
    outside = {lid: pkgs for lid, pkgs in outside.items() if pkgs}
    assert {lid: pkgs[0] for lid, pkgs in outside.items()} == {
        k: v for k, v in ENTRY_OUTSIDE_ITS_CONCERN.items() if k in outside}
    assert set(outside) <= set(ENTRY_OUTSIDE_ITS_CONCERN)
    assert all(entry_packages(app.read_text()) for app in functions.values())  # each calls an entry
    # the page's table names each scheduled function and an entry its app.py imports
    rows = [line for line in ARCHITECTURE.read_text().splitlines() if re.match(r"\s*\| `\w+`, (rate|cron)\(", line)]
    table = {m[1]: m[2] for m in (re.search(r"`(\w+Function)`.*\| `(lakeq\.[\w.]+)\.\w+`", r) for r in rows) if m}
    assert set(table) == set(functions)
    for lid, module in table.items():
        assert module in imported(functions[lid].read_text()), (lid, module)
    assert entry_packages("from lakeq.store.groups import sweep\nfrom lakeq.common.obs import logger\n") == {"store"}


def test_make_test_runs_every_test_folder():
    """`make test` names its folders (unit, integration and spark on pytest-xdist workers, e2e beside
    them on one process): a new folder of tests must be added there or it would never run."""
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"\btests/(\w+)", recipe))
    folders = {p.parent.relative_to(ROOT / "tests").parts[0] for p in (ROOT / "tests").rglob("test_*.py")}
    assert named == folders, (named, folders)


# --------------------------------------------------------------- one key grammar (issue 31 item 2)
# lakeq.common.names spells and parses every key composed from names: a queue's ``<log>#<queue>``,
# a subscription's list ``~<id>``, a replay's list ``~r.<id>``. Anywhere else, writing or cutting
# those by hand is a second copy of the grammar that can drift from it.
KEY_GRAMMAR_OWNERS = {
    "layers/core/lakeq/common/names.py": "the key grammar",
    "layers/core/lakeq/log/delay_plan.py": "the due key <deliver_at><seq>#<id>: delayed delivery's own, spelled and parsed there",
}
HAND_SPELLED_KEY = re.compile(
    r"""(partition|split)\(\s*["']#["']"""  # cutting a key at '#'
    r"""|\}#\{"""  # f"{log}#{queue}"
    r"""|["']#["']\s*\+|\+\s*["']#["']"""  # log + "#" + queue
    r"""|startswith\(\s*["']~"""  # is it a list?
    r"""|f["']~\{|["']~["']\s*\+"""  # f"~{sub_id}", "~" + sub_id
)


def hand_spelled_keys(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()
            if HAND_SPELLED_KEY.search(line) and not line.lstrip().startswith(("#", ">>>", "..."))]


def test_the_key_grammar_is_spelled_in_one_module():
    found = {}
    for path in sorted([*(ROOT / "layers" / "core" / "lakeq").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel in KEY_GRAMMAR_OWNERS:
            continue
        hits = hand_spelled_keys(path.read_text())
        if hits:
            found[rel] = hits
    assert found == {}, "use lakeq.common.names (queue_key, split_queue_key, is_list, list_log, ...)"


def test_the_key_grammar_check_sees_each_hand_spelling():
    for bad in ('pq = f"{topic}#{q}"', 'log, _, q = pq.rpartition("#")', "x = pq.split('#', 1)[0]",
                'k = topic + "#" + str(q)', 'if pq.startswith("~"):', 'return f"~{sub_id}"', 'k = "~" + s'):
        assert hand_spelled_keys(bad) == [bad], bad
    for fine in ('log, q = split_queue_key(pq)', '# a comment: f"{log}#{q}"', '>>> x.startswith("~")',
                 'h = "#" * n', 'url.partition("?")'):
        assert hand_spelled_keys(fine) == [], fine


# --------------------------------------------------- one compare-and-set loop (issue 31 item 2)
# lakeq.common.backoff.cas is the one optimistic-concurrency retry loop and CAS_ATTEMPTS its one
# bound. A module that defines its own ``*ATTEMPTS = <int>`` is a second bound (and usually a second
# loop): use cas and CAS_ATTEMPTS, or list the module here with the reason its bound differs.
OWN_ATTEMPTS = {
    ("layers/core/lakeq/common/backoff.py", "CAS_ATTEMPTS"): "the one bound",
    ("layers/core/lakeq/store/groups.py", "ATTEMPTS"):
        "a round is a whole group request (header up to 350 KB, liveness Query, queue counts, transaction) "
        "with a 5-200 ms backoff: 12 rounds bound a request's waiting at about 1.3 s",
    ("layers/core/lakeq/fanout/worker.py", "PARK_ATTEMPTS"):
        "a give-up raises into the stream's retry of the whole batch (an outer retry)",
    ("layers/core/lakeq/store/append.py", "BUMP_ATTEMPTS"):
        "not a compare-and-set: the change marker's unconditional bump after a store error; 4 rounds with "
        "the 2-50 ms backoff bound a produce's extra wait before its 503 at about 60 ms",
    ("layers/core/lakeq/store/writes.py", "TRANSACT_ATTEMPTS"):
        "not a compare-and-set: transact() resends the same transaction after a TransactionConflict, "
        "which wrote nothing and decided nothing",
}


def attempts_constants(source: str) -> list[str]:
    """The names ``source`` binds to an int literal whose name ends in ``ATTEMPTS``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        pairs = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += list(zip(target.elts, node.value.elts))
                else:
                    pairs.append((target, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs.append((node.target, node.value))
        out += [t.id for t, v in pairs if isinstance(t, ast.Name) and t.id.endswith("ATTEMPTS")
                and isinstance(v, ast.Constant) and type(v.value) is int]
    return out


def test_retry_bounds_are_the_one_cas_attempts_or_listed_with_a_reason():
    found = []
    for path in sorted([*CORE.rglob("*.py"), *(ROOT / "functions").rglob("*.py")]):
        rel = str(path.relative_to(ROOT))
        found += [(rel, name) for name in attempts_constants(path.read_text())]
    assert sorted(set(found) - set(OWN_ATTEMPTS)) == [], (
        "retry with lakeq.common.backoff.cas and CAS_ATTEMPTS, or list the bound in OWN_ATTEMPTS with its reason")
    assert sorted(set(OWN_ATTEMPTS) - set(found)) == [], "OWN_ATTEMPTS lists a bound that no longer exists"


def test_the_attempts_check_sees_each_own_bound():
    for bad in ("ATTEMPTS = 40", "APPEND_ATTEMPTS = 40", "KEY_SET_ATTEMPTS: int = 3", "A, B_ATTEMPTS = 1, 8",
                "def f():\n    ATTEMPTS = 5"):
        assert attempts_constants(bad), bad
    for fine in ("ATTEMPTS_MIN, ATTEMPTS_MAX = 1, 100", "ATTEMPTS = CAS_ATTEMPTS", "attempts = 3 + 1",
                 "MAX_ATTEMPTS = '5'", "ATTEMPTS = True"):
        assert attempts_constants(fine) == [], fine


def test_no_exception_class_name_is_defined_twice():
    """Two exception classes of one name (``BadRequest`` in common.errors and in rebalance.state,
    ``Conflict`` in common.errors and store.groups) make an ``except`` catch the wrong one."""
    seen: dict[str, list[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in ERROR_BASES)
                    or isinstance(b, ast.Attribute) and b.attr.endswith(("Error", "Exception"))
                    for b in node.bases):
                seen.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


ERROR_BASES = {"BadRequest", "Conflict", "NotFound", "Unavailable", "Forbidden", "Unauthorized", "GroupError",
               "StaleReceipt", "TooLarge", "Gone"}


# --------------------------------------------------------------- consume's engine API (issue 31 item 2)
# consume declares its API in its __init__ (`lakeq.consume.__all__`: the engine's typed entry points
# pull_batch, group_lock, settle_lock, set_visibility, and the HTTP use cases). A module outside
# consume takes those names from the package; importing a submodule (`from lakeq.consume import
# settle`, `from lakeq.consume.reader import topic_reader`) reaches past the API into the engine's
# internals. Every package (push, subscriptions, peek, redrive, console, the SQS adapter) now uses
# the package API only.
CONSUME_INTERNALS_ALLOWED: dict[str, tuple[set[str], str]] = {}  # none any more


def consume_internals(source: str, api: set[str], submodules: set[str]) -> set[str]:
    """What ``source`` takes from consume past its package API: a submodule imported as a module
    (``lakeq.consume.<sub>``), a name taken from a submodule (``lakeq.consume.<sub>.<name>``), or a
    name the package does not declare (``lakeq.consume.<name>``)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod == "lakeq.consume":
                out.update(f"{mod}.{a.name}" for a in node.names if a.name not in api or a.name in submodules)
            elif mod.startswith("lakeq.consume."):
                out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("lakeq.consume."))
    return out


def _consume_api() -> tuple[set[str], set[str]]:
    import lakeq.consume
    return set(lakeq.consume.__all__), {p.stem for p in (CORE / "consume").glob("*.py")} - {"__init__"}


def test_other_packages_use_consumes_engine_api_only():
    api, submodules = _consume_api()
    assert {"pull_batch", "group_lock", "settle_lock", "set_visibility", "PullRequest"} <= api
    found = {}
    for path in [*(p for pkg, _, p in modules() if pkg != "consume"), *FUNCTIONS.rglob("*.py")]:
        rel = str(path.relative_to(ROOT))
        if uses := consume_internals(path.read_text(), api, submodules):
            found[rel] = uses
    over = {p: sorted(u - CONSUME_INTERNALS_ALLOWED.get(p, (set(), ""))[0]) for p, u in found.items()}
    assert {p: u for p, u in over.items() if u} == {}
    assert not any(p.startswith("layers/core/lakeq/sqs/") for p in CONSUME_INTERNALS_ALLOWED)
    stale = {p: sorted(names - found.get(p, set())) for p, (names, _) in CONSUME_INTERNALS_ALLOWED.items()}
    assert {p: s for p, s in stale.items() if s} == {}  # the allow-list is not stale


def test_the_consume_api_checker_sees_each_way_past_the_api():
    api, submodules = _consume_api()
    for bad in ("from lakeq.consume import service", "from lakeq.consume import settle as settling",
                "from lakeq.consume.reader import broker", "import lakeq.consume.settle",
                "def f():\n    from lakeq.consume.engine import pull_batch\n", "from lakeq.consume import _private"):
        assert consume_internals(bad, api, submodules), bad
    for fine in ("from lakeq.consume import pull_batch, settle_lock", "from lakeq import consume",
                 "from lakeq.consume import views as _views", "from lakeq.contract import validation"):
        assert consume_internals(fine, api, submodules) == set(), fine


# --------------------------------------------------------------- models private to store (issue 31 item 1)
# The pynamodb models are store's own: a repository returns plain records (lakeq.store.records: Topic,
# Client, Queue; lakeq.store.subscriptions.Subscription) and turns a record passed back in into the model it writes. A module outside store
# that imports a model (``lakeq.store.models``, or any ``*Model`` name from a store module) uses a
# pynamodb item as its domain object again, where an attribute write or an ``isinstance`` test can
# slip past the repositories. What may stay, and why: path relative to the repository root -> reason.
MODELS_ALLOWED: dict[str, tuple[set[str], str]] = {}  # none any more


def model_imports(source: str) -> set[str]:
    """What ``source`` imports of the store's models: the module ``lakeq.store.models`` (however
    named; a name from it as ``lakeq.store.models.<name>``) or a ``*Model`` name from any store module."""
    bad = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            for a in node.names:
                if (mod == "lakeq.store.models" or (mod == "lakeq.store" and a.name == "models")
                        or (mod.startswith("lakeq.store") and a.name.endswith("Model"))):
                    bad.add(f"{mod}.{a.name}")
        elif isinstance(node, ast.Import):
            bad.update(a.name for a in node.names if a.name.startswith("lakeq.store.models"))
    return bad


def test_no_module_outside_store_imports_a_model():
    found = {str(p.relative_to(ROOT)): hits for p in outside_store() if (hits := model_imports(p.read_text()))}
    over = {p: sorted(h - MODELS_ALLOWED.get(p, (set(), ""))[0]) for p, h in found.items()}
    assert {p: h for p, h in over.items() if h} == {}
    assert not any(n.startswith("lakeq.store.models") for names, _ in MODELS_ALLOWED.values() for n in names)
    stale = {p: sorted(names - found.get(p, set())) for p, (names, _) in MODELS_ALLOWED.items()}
    assert {p: s for p, s in stale.items() if s} == {}  # the allow-list is not stale


def test_the_model_import_checker_catches_what_it_should():
    for bad in ("from lakeq.store.models import log_of", "from lakeq.store.models import ClientModel as C",
                "from lakeq.store import models", "from lakeq.store import TopicModel, TopicRepo",
                "import lakeq.store.models", "def f():\n    from lakeq.store.models import QueueModel\n",
                "from lakeq.store.subscriptions import SubscriptionModel"):
        assert model_imports(bad), bad
    for fine in ("from lakeq.store import Client, Topic, TopicRepo, log_of", "from lakeq.store.records import Queue",
                 "from lakeq.common.names import log_of", "from lakeq.store.catalog import ClientRepo"):
        assert model_imports(fine) == set(), fine
