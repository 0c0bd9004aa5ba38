"""Issue 15 item 3 (one error root): every exception class of the core and the functions derives
from :class:`lakeq.common.errors.LakeqError`, and the API's HTTP mapping is one function."""
from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from lakeq.common import errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORE = ROOT / "layers" / "core" / "lakeq"


def _exception_classes():
    """(module, class name) of every class in the core whose name says it is an error, or that
    subclasses an exception by name (``Exception``, ``*Error``, ``*Failed``…)."""
    out = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).with_suffix("")
        mod = ".".join(["lakeq", *rel.parts]) if rel.name != "__init__" else "lakeq"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.split(".")[-1] in ("Exception", "RuntimeError", "ValueError", "KeyError")
                       or b.endswith(("Error", "Failed")) for b in bases):
                    out.append((mod, node.name))
    return out


CLASSES = _exception_classes()


def test_the_scan_finds_the_errors():
    names = {c for _, c in CLASSES}
    assert {"ApiError", "TransactionFailed", "SqsError", "SigV4Error", "Stale", "GroupError"} <= names


@pytest.mark.parametrize("mod,name", CLASSES, ids=[f"{m}.{c}" for m, c in CLASSES])
def test_every_core_error_derives_from_the_root(mod, name):
    cls = getattr(importlib.import_module(mod), name)
    assert issubclass(cls, errors.LakeqError), f"{mod}.{name} does not derive from lakeq.common.errors.LakeqError"


def test_the_archivers_poison_batch_derives_from_the_root():
    src = (ROOT / "functions" / "archiver" / "app.py").read_text()
    assert "class PoisonBatch(LakeqError)" in src


@pytest.mark.parametrize("exc,expected", [
    (errors.BadRequest("nope"), (400, "bad_request", "nope")),
    (errors.StaleReceipt("old"), (409, "stale_receipt", "old")),
    (errors.Unavailable("busy now"), (503, "busy", "busy now")),
    (errors.ApiError("x", code="c", status=418), (418, "c", "x")),
    (errors.LakeqError("secret internals"), (500, "internal_error", "internal error")),
    (KeyError("k"), (500, "internal_error", "internal error")),
])
def test_http_mapping_is_one_function(exc, expected):
    assert errors.http_error(exc) == expected
