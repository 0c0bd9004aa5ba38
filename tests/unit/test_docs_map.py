"""The docs are a map: what they name must exist, and their tables of functions, environment variables
and tables must equal template.yaml's (as ``infra/local/template.py`` loads it).

Paths: every path README.md and docs/*.md name (backticked or not) under ``layers/``, ``functions/``,
``infra/``, ``glue_jobs/``, ``bench/``, ``tests/``, ``clients/``, ``events/``, ``docs/`` (and the short forms
``lakeq/…`` = ``layers/core/lakeq/…``, ``matcher/…`` = ``layers/matcher/matcher/…``, ``unit/…``,
``integration/…``, ``e2e/…`` = ``tests/…``) exists; ``path::test_name`` names a test defined in that file;
``path.NAME`` (a module's attribute) is defined in that module; a test file named alone
(``test_x.py``, ``test_x.py::test_y``) exists somewhere under ``tests/`` (and defines that test); a
dotted ``lakeq.<package>.<module>`` is a module of the core (or a name its package exports).
Placeholders (``functions/<name>/app.py``, ``tests/unit/*.py``) are not paths; another repository's
files named as such (moto's suite) are listed in ``ELSEWHERE``.
Built, git-ignored output is accepted only where the code makes it: ``glue_jobs/dist/<job>.py`` for a
job ``glue_jobs/package.py``'s ``JOBS`` names, ``tests/artifacts/``.

Tables (the strictest comparison each table supports):
- the function table (``| function | CodeUri | triggers |``): the same logical ids; per function the same
  CodeUri, the same set of HTTP routes (method, path), the same set of tables whose streams trigger it,
  and the same set of EventBridge schedule expressions;
- the environment table (``| variable | set by | read by | what |``): per variable, the set of functions
  whose environment sets it in the template (``Globals`` = every function; a row set by the local stack,
  the tests or Lambda names a variable the template does not set), and every variable the template sets
  has a row;
- the table of tables (``| logical id | env var | keys | holds |``): the same DynamoDB tables, each with
  the variable the template sets to its name.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.local import template as T

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_TOP = r"(?:layers|functions|infra|glue_jobs|bench|tests|clients|events|docs|lakeq|matcher|unit|integration|e2e)/"
PATH = re.compile(r"(?<![\w./:-])(" + _TOP + r"[\w./<>{}*…-]*)(?:::(\w+))?")
BASENAME = re.compile(r"(?<![\w/.-])(test_\w+\.py)(?:::(\w+))?")
DOTTED = re.compile(r"(?<![\w.])lakeq\.([a-z_]+)\.([a-z_][a-z0-9_]*)\b")
SHORT = {"lakeq/": "layers/core/lakeq/", "matcher/": "layers/matcher/matcher/", "unit/": "tests/unit/",
         "integration/": "tests/integration/", "e2e/": "tests/e2e/"}
# another repository's files, named as such on the line ("moto 5.2.5's own SQS suite")
ELSEWHERE = {"tests/test_sqs/test_sqs.py", "tests/test_sqs/test_sqs_message_attributes.py"}


def built() -> set[str]:
    """Paths that exist only once built (git-ignored): the Glue bundles of glue_jobs/package.py's JOBS."""
    from glue_jobs.package import JOBS
    return {"glue_jobs/dist/", "tests/artifacts/", *(f"glue_jobs/dist/{job}.py" for job in JOBS)}


def resolve(path: str) -> str:
    for short, full in SHORT.items():
        if path.startswith(short):
            return full + path[len(short):]
    return path


def defines(file: Path, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]", file.read_text(), re.M))


def stale(text: str, extra: frozenset[str] = frozenset()) -> list[str]:
    """What ``text`` names that does not exist (one entry per line and reference)."""
    ok = built() | extra
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        for raw, test in PATH.findall(line):
            path = raw.rstrip(".,;:)")
            if any(c in path for c in "<>{}*…") or path in ELSEWHERE:
                continue
            full = resolve(path)
            if full in ok or full.rstrip("/") + "/" in ok:
                continue
            target = ROOT / full
            if not target.exists():
                m = re.fullmatch(r"(.+)\.([A-Za-z_]\w*)", full)  # module.ATTRIBUTE
                if m and (ROOT / f"{m[1]}.py").is_file() and defines(ROOT / f"{m[1]}.py", m[2]):
                    continue
                bad.append(f"{n}: {path} (no such file)")
            elif test and not (target.is_file() and defines(target, test)):
                bad.append(f"{n}: {path}::{test} (no such test)")
        for name, test in BASENAME.findall(line):  # a test file named alone: somewhere under tests/
            found = sorted((ROOT / "tests").rglob(name))
            if not found:
                bad.append(f"{n}: {name} (no such test file)")
            elif test and not any(defines(f, test) for f in found):
                bad.append(f"{n}: {name}::{test} (no such test)")
        for pkg, mod in DOTTED.findall(line):
            core = ROOT / "layers/core/lakeq" / pkg
            init = core / "__init__.py"
            exported = init.is_file() and re.search(rf"\b{mod}\b", init.read_text())
            if not (core / f"{mod}.py").is_file() and not (core / mod / "__init__.py").is_file() and not exported:
                bad.append(f"{n}: lakeq.{pkg}.{mod} (no such module)")
    return bad


def test_the_checker_catches_what_it_should():
    assert stale("`layers/core/lakeq/push/service.py`, lakeq/consume/reader.py") == []
    assert stale("`lakeq/sqs/service.py`") == ["1: lakeq/sqs/service.py (no such file)"]
    assert stale("see bench/nothing.py.") == ["1: bench/nothing.py (no such file)"]
    assert stale("`integration/test_redrive.py::test_no_such_test`")
    assert stale("`tests/unit/test_docs_map.py::test_the_checker_catches_what_it_should`") == []
    assert stale("`glue_jobs/dist/replay.py`, `functions/<name>/app.py`, `tests/unit/*.py`") == []
    assert stale("`glue_jobs/dist/nojob.py`")
    assert stale("`lakeq.sqs.service`") == ["1: lakeq.sqs.service (no such module)"]
    assert stale("`lakeq.consume.reader`, `infra/local/aws_rules.HTTP_API_BODY_LIMIT`") == []
    assert stale("`infra/local/aws_rules.NO_SUCH_LIMIT`")
    assert stale("`test_docs_map.py::test_the_checker_catches_what_it_should`, test_fold.py") == []
    assert stale("`test_no_such_file.py`") == ["1: test_no_such_file.py (no such test file)"]
    assert stale("`test_fold.py::test_no_such_test`") == ["1: test_fold.py::test_no_such_test (no such test)"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_the_docs_name_exists(doc):
    assert stale(doc.read_text()) == []


# ------------------------------------------------------------------------------------------- tables
def doc_table(header: str) -> list[list[str]]:
    """The rows (cells) of the one table in the docs whose header row is ``header``."""
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == header:
                rows = []
                for row in lines[i + 2:]:
                    if not row.startswith("|"):
                        break
                    rows.append([c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]])
                found.append(rows)
    assert len(found) == 1, f"{header}: {len(found)} tables"
    return found[0]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


METHOD = r"(?:GET|POST|PUT|PATCH|DELETE)"


def routes(cell: str) -> set[tuple[str, str]]:
    """``HTTP: `POST`/`GET /v1/x`, `PATCH /v1/x/{id}`, `…/y``` → {(POST, /v1/x), (GET, /v1/x), …}."""
    out, pending, last, last_methods = set(), [], None, []
    for span in ticked(cell):
        if re.fullmatch(METHOD, span):
            pending.append(span)
            continue
        m = re.fullmatch(rf"(?:({METHOD}) )?(/\S*|…/\S+)", span)
        if not m:
            pending = []
            continue
        path = m[2]
        if path.startswith("…/"):
            path = last.rsplit("/", 1)[0] + path[1:]
            methods = pending + [m[1]] if m[1] else last_methods
        else:
            methods = pending + [m[1]] if m[1] else pending
        out.update((meth, path) for meth in methods)
        last, last_methods, pending = path, methods, []
    return out


def streams(cell: str) -> set[str]:
    """The tables ``… XTable, YTable and ZTable streams …`` names as triggers."""
    out = set()
    for m in re.finditer(r"((?:\w+Table(?:, | and ))*\w+Table) streams?\b", cell):
        out.update(re.findall(r"\w+Table", m[1]))
    return out


def schedules(cell: str) -> set[str]:
    return set(re.findall(r"(?:rate|cron)\([^)]*\)", cell))


def template_schedules(tpl, lid: str) -> set[str]:
    events = (tpl["Resources"][lid].get("Properties") or {}).get("Events") or {}
    return {ev["Properties"]["Schedule"] for ev in events.values() if ev.get("Type") == "Schedule"}


@pytest.fixture(scope="module")
def tpl():
    return T.load_template()


def test_the_route_parser_reads_the_tables_notation():
    cell = ("HTTP: `GET /v1/health`, `POST`/`GET /v1/topics`, `PUT`/`GET`/`DELETE /v1/s/{id}/push`, "
            "`POST /v1/s/{id}/push/pause`, `…/resume`; EventBridge `Schedule` rate(1 minute)")
    assert routes(cell) == {("GET", "/v1/health"), ("POST", "/v1/topics"), ("GET", "/v1/topics"),
                            ("PUT", "/v1/s/{id}/push"), ("GET", "/v1/s/{id}/push"), ("DELETE", "/v1/s/{id}/push"),
                            ("POST", "/v1/s/{id}/push/pause"), ("POST", "/v1/s/{id}/push/resume")}
    assert streams("SegmentsTable, OffsetsTable and GroupsTable streams (batch 1000); one WatchersTable Query") == {
        "SegmentsTable", "OffsetsTable", "GroupsTable"}
    assert schedules(cell) == {"rate(1 minute)"}


def test_the_function_table_is_the_templates(tpl):
    specs = {s.logical_id: s for s in T.functions(tpl)}
    rows = {ticked(r[0])[0]: r for r in doc_table("| function | CodeUri | triggers |")}
    assert set(rows) == set(specs)
    for lid, spec in specs.items():
        code_uri, triggers = rows[lid][1], rows[lid][2]
        assert ticked(code_uri) == [spec.code_uri.relative_to(ROOT).as_posix() + "/"], lid
        assert routes(triggers) == set(spec.http_routes), lid
        assert streams(triggers) == {e.table for e in spec.stream_events}, lid
        assert schedules(triggers) == template_schedules(tpl, lid), lid


def test_the_environment_table_is_the_templates(tpl):
    every = {s.logical_id for s in T.functions(tpl)}
    glob = set((((tpl.get("Globals") or {}).get("Function") or {}).get("Environment") or {}).get("Variables") or {})
    setters: dict[str, set[str]] = {v: set(every) for v in glob}
    for lid in every:
        own = ((tpl["Resources"][lid].get("Properties") or {}).get("Environment") or {}).get("Variables") or {}
        for var in own:
            setters.setdefault(var, set()).add(lid)
    documented: dict[str, set[str]] = {}
    for row in doc_table("| variable | set by | read by | what |"):
        names, set_by = ticked(row[0]), row[1]
        by = set(every) if set_by.startswith("Globals") else {t for t in ticked(set_by) if t.endswith("Function")}
        for var in names:
            assert var not in documented, f"{var}: two rows"
            documented[var] = by
    assert {v: f for v, f in documented.items() if f} == setters
    assert set(setters) <= set(documented)


def test_the_table_of_tables_is_the_templates(tpl):
    tables = set(T.resources_of_type(tpl, "AWS::DynamoDB::Table"))
    names = {}
    for lid in T.functions(tpl):
        for var, value in ((tpl["Resources"][lid.logical_id]["Properties"].get("Environment") or {})
                           .get("Variables") or {}).items():
            if isinstance(value, dict) and value.get("Ref") in tables:
                names[value["Ref"]] = var
    glob = (((tpl.get("Globals") or {}).get("Function") or {}).get("Environment") or {}).get("Variables") or {}
    for var, value in glob.items():
        if isinstance(value, dict) and value.get("Ref") in tables:
            names[value["Ref"]] = var
    rows = {ticked(r[0])[0]: ticked(r[1])[0] for r in doc_table("| logical id | env var | keys | holds |")}
    assert rows == names


# ------------------------------------------------------------------------------------------- links
def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces → hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    out, seen = set(), {}
    for line in doc.read_text().splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if m:
            s = slug(m[1])
            out.add(f"{s}-{seen[s]}" if s in seen else s)
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(doc: Path) -> list[str]:
    """``[..](page.md#anchor)`` and ``[..](#anchor)`` links of ``doc`` whose page or section is missing."""
    bad, fenced = [], False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        fenced ^= line.startswith("```")
        for page, anchor in ([] if fenced else re.findall(r"\]\(([^)#\s]*\.md|)#([^)\s]+)\)", line)):
            target = doc.parent / page if page else doc
            if not target.is_file() or anchor not in anchors(target):
                bad.append(f"{n}: {page}#{anchor}")
    return bad


def test_the_anchor_rule_is_githubs(tmp_path):
    assert slug("Data lake (SPEC §5: lakeq/lake/archive.py, functions/archiver, glue_jobs/)") == \
        "data-lake-spec-5-lakeqlakearchivepy-functionsarchiver-glue_jobs"
    page = tmp_path / "p.md"
    page.write_text("# A\n## Who may import whom\n[ok](#who-may-import-whom) [gone](#who-may-import)\n")
    assert broken_links(page) == ["3: #who-may-import"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_to_a_section_finds_it(doc):
    """A section moved to another page (history.md, architecture.md) keeps the links to it working."""
    assert broken_links(doc) == []
