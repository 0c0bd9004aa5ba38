"""What the benchmarks that run lakeq's handlers in their own process share: the import path and
the environment of the local stack (fake credentials for moto, powertools quiet, the tables'
names from ``template.yaml``), and ``bench/queue.py``'s module (its ``Meter`` and prices).

Imported as ``import _local`` while the script's own folder is still first on ``sys.path``
(``python bench/x.py`` puts it there); :func:`in_process` then takes that folder off, because
``bench/queue.py`` would shadow the standard library's ``queue`` (botocore and py4j import it).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
ADMIN_KEY = "local-admin-key"
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled", "LAKEQ_ADMIN_KEY": ADMIN_KEY,
            "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING"}
_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
          "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3")


def in_process(*extra_paths: Path) -> None:
    """``sys.path`` = the checkout, the layers (and ``extra_paths``) first, ``bench/`` gone; the
    environment of the local stack's functions (moto's fake credentials, the tables' names)."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
    sys.path[:0] = [str(ROOT), str(ROOT / "layers" / "core"), str(ROOT / "layers" / "matcher"),
                    *map(str, extra_paths)]
    for var in _UNSET:
        os.environ.pop(var, None)
    os.environ.update(FAKE_AWS)
    from infra.local import template as tpl

    os.environ.update(tpl.environment(tpl.load_template(), tpl.LOCAL_STACK))


def bench_queue() -> ModuleType:
    """``bench/queue.py`` (named like the standard library's ``queue``): its Meter, prices and hooks."""
    spec = importlib.util.spec_from_file_location("bench_queue", ROOT / "bench" / "queue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod
