"""Benchmarks drift when the core's API moves and nothing runs them: ``bench/fanout.py`` crashed
with an AttributeError for a while after ``plan()`` began returning a ``Plan``. The quick ones that
take seconds are run here whole, as a user would, so such a drift fails a test."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fanout_bench_quick_runs_and_prints_its_figures():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fanout.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "10,000" in out.stdout or "10000" in out.stdout, out.stdout
    assert "baseline" in out.stdout, out.stdout  # each figure next to its baseline, side by side


def test_group_storage_bench_quick_runs_as_a_script_and_prints_its_ratio():
    """Run as ``python bench/group_storage.py``: its folder first on the path once made
    ``bench/queue.py`` shadow the standard library's ``queue`` (urllib3 failed to import)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "group_storage.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "header / old" in out.stdout and "| 100 |" in out.stdout, out.stdout


# bench/lake.py's smoke run is tests/spark/test_bench_lake.py: in that lane's JVM, not one of its own.
