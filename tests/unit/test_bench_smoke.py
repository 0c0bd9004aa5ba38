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
