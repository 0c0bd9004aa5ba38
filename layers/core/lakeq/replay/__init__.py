"""Replay from the data lake (issue 18.1): ``rules`` — the replay request, the filter (the
subscription condition language, evaluated by the matcher layer itself), the hour partitions a
time range reads, the copies' derived ids and the copier's chunks and pacing; ``copier`` — the copy
loop (chunks from a cursor, derived ids, a conditional cursor write per chunk, pacing), storage and
produce passed in; ``group_target`` — the ``{"group"}`` target (a hidden list per replay that only that
group's pulls read; pure rules in ``group_plan``, storage in ``lakeq.store.replay_lists``). No AWS in
``rules`` and ``copier``: the Glue job (``glue_jobs/lakeq_lake/replay.py``) and the copier share
these definitions. ``service`` — the routes' use cases (start, show, list, cancel) and the copier the
``ReplayFunction`` schedule runs (storage in :mod:`lakeq.store.replays`, the job's start in
:mod:`lakeq.store.jobs`).
"""
from lakeq import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "copier": ("Copy", "Progress", "run",),
    "group_target": ("begin", "end", "sink",),
    "rules": ("Filter", "ReplayRequest", "copy_id", "field_needles", "hour_bounds", "next_chunk",
              "parse_request", "pace_seconds",),
    "service": ("Manifest", "cancel", "copy_message", "get", "list_", "run_all", "start", "topic_sink",),
})
