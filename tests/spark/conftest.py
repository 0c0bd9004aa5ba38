"""One local SparkSession (``local[2]``) for the whole test session; every test here is marked
``spark`` (select with ``-m spark``, skip with ``-m 'not spark'``). Skipped when pyspark or Java is
missing (``pip install -e '.[lake]'``)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "glue_jobs") not in sys.path:
    sys.path.insert(0, str(ROOT / "glue_jobs"))


# A Spark test's time is its jobs' count times the JVM's speed: 112 s for the longest in a quiet
# `make test`, ~300 s seen with other Spark runs beside it. The suite-wide 300 s (pyproject) would
# make a busy machine fail it; a test that hangs still ends.
SPARK_TIMEOUT_S = 1200


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.spark)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))


# Expressions evaluated as they are, not compiled to Java (Janino) first: these tests' data are a few
# thousand rows, so compiling each query's code cost most of a job's CPU. Same results (Spark keeps
# the interpreted and the generated evaluators equal; it falls back to the first when the second fails
# to compile); the production jobs keep Glue's code generation, which the Glue scripts run as Glue
# runs them (tests/unit/test_glue_packaging.py) still go through. CPU of the process
# tree, one run each, machine loaded (load 5-11): test_transforms.py 70.5 -> 56.3 s; test_compact.py's
# compacted-lake equality test 101.9 -> 72.9 s; test_replay.py's native-filter and escaped-values
# tests 128.3 -> 112.1 s (their cost is py4j round trips).
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


# py4j resolves every name it is asked for by a round trip to the JVM, each time: pyspark's
# ``F.when(...)`` is three (``sc._jvm.functions``: the class; ``.when``: the method; the call), and
# building a native filter's columns is ~10^4 of them (tests/spark/test_replay.py's generated-filters
# test: 66,128 round trips, 310 of its 392 s of wall under load 20 waiting on them; 63 s of CPU). The
# class a name resolves to and a class's static methods never change while the JVM lives, so the
# answers are kept on the view and the class (the attribute set on the instance: Python looks no
# further) — the calls themselves still go to the JVM. Static fields are values, not kept.
# LAKEQ_PY4J_LOOKUPS=plain: py4j as it is (to compare).
def _keep_py4j_lookups() -> None:
    from py4j.java_gateway import JavaClass, JavaMember, JVMView

    view_getattr, class_getattr = JVMView.__getattr__, JavaClass.__getattr__

    def view_lookup(self, name):
        found = view_getattr(self, name)
        if isinstance(found, JavaClass):
            self.__dict__[name] = found
        return found

    def class_lookup(self, name):
        found = class_getattr(self, name)
        if isinstance(found, (JavaMember, JavaClass)):
            self.__dict__[name] = found
        return found

    JVMView.__getattr__, JavaClass.__getattr__ = view_lookup, class_lookup


if os.environ.get("LAKEQ_PY4J_LOOKUPS") != "plain":
    try:
        _keep_py4j_lookups()
    except ImportError:  # no pyspark: the tests skip
        pass


def make_session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("lakeq-tests")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "1g")
            .config(map=INTERPRETED)
            .getOrCreate())


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    s = make_session()
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
