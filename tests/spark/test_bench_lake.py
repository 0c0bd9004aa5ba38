"""``bench/lake.py`` builds its rows by hand: it crashed (``inc`` cannot be resolved) once the lake's
rows gained the topic's incarnation and the transforms read it. Its code (the synthetic lake, the
transform timed over it) runs here on a 20,000-row lake, in this lane's SparkSession: as a script
(tests/unit/test_bench_smoke.py before) it started a JVM of its own in the workers' lane, whose
start and first job were about half of its ~18 CPU-s. The figure is the bench's job, not this test's."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lake_bench_runs_on_the_lake_schemas(spark):
    spec = importlib.util.spec_from_file_location("bench_lake", ROOT / "bench" / "lake.py")
    lake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lake)
    seconds, rows = lake.run(spark, 20_000)
    assert rows == 20_000 + 20_000 // 20 * lake.GROUPS  # the message rows and one offset row per 20 per group
    assert seconds > 0
