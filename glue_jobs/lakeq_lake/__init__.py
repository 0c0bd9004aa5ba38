"""lakeq's data-lake jobs: pure DataFrame transforms (:mod:`.transforms`), the lake's storage
(:mod:`.store`: ``s3://`` on Glue, a local folder on a laptop), the driver-side plan builder
(:mod:`.plans`) and the two job bodies (:mod:`.jobs`). The entry points are
``glue_jobs/backlog.py`` and ``glue_jobs/rebalance_plan.py``; their shared bootstrap is
:func:`local_paths` (here: it must run before :mod:`.jobs`, which imports the core layer) and
:func:`.jobs.session`."""
from __future__ import annotations

import os
import sys


def local_paths() -> None:
    """Outside Glue (where the job's bundle holds them): put the repo's ``glue_jobs`` folder and
    the core and matcher layers first on ``sys.path``. A no-op when they are not there."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # glue_jobs/
    for p in (here, os.path.join(here, "..", "layers", "core"), os.path.join(here, "..", "layers", "matcher")):
        if os.path.isdir(p) and os.path.abspath(p) not in map(os.path.abspath, sys.path):
            sys.path.insert(0, os.path.abspath(p))
