"""Replays' storage (issue 18.1, :mod:`lakeq.replay.service`).

ReplaysTable (``REPLAYS_TABLE``, key ``id``): one item per replay — the request (``topic``,
``from_ms``, ``to_ms``, ``filter`` and ``target`` as JSON text, ``rate``), ``status`` (selecting →
copying → done | failed | cancelled; a dry run, ``dry_run`` 1: selecting → selected | failed |
cancelled, with ``found`` and ``sample``), the copier's progress (``found``, ``cursor``, ``copied``,
``failed``, ``duplicates``) and ``version``, which every write but a cancel moves. Every state
change and cursor move is one conditional UpdateItem on ``version`` and/or ``status``.

``live`` ("1") is set when a replay is created and removed once it has ended *and* its target was
told (``group_target.end``; :meth:`ReplayRepo.unlive`): an outbox, so a crash between the final
status and that call leaves it to the next run. The sparse index ``live`` (keys only) is what the
schedule queries, so an idle minute costs one Query of an empty index whatever the number of
replays kept.

The selection job's objects under ``replays/<id>/`` of the lake bucket (``selection.json``,
``error.json``, ``manifest/part-*.txt`` — records, :mod:`lakeq.store.replay_manifest`; ``.json`` for
manifests written before 2026-12-07, ``.json.gz`` before 2026-11-25)
are read here too (:class:`ReplayObjects`; S3 through the one botocore client of
:mod:`lakeq.store.bodies`).
"""
from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from lakeq.store import replay_manifest as records
from lakeq.store import slots
from lakeq.store.models import _meta
from lakeq.store.records import model_of, record_of
from lakeq.store.writes import update_if

LIVE_STATUSES = ("selecting", "copying")
FINAL = ("done", "failed", "cancelled", "selected")  # selected: a dry run's end


class LiveIndex(GlobalSecondaryIndex):
    class Meta:
        index_name = "live"
        projection = KeysOnlyProjection()
    live = UnicodeAttribute(hash_key=True)


class ReplayModel(Model):
    Meta = _meta("REPLAYS_TABLE", "lakeq-replays")
    id = UnicodeAttribute(hash_key=True)
    topic = UnicodeAttribute()
    from_ms = NumberAttribute()
    to_ms = NumberAttribute()
    filter = UnicodeAttribute()  # JSON {"conditions": [...], "tags": [...]}
    target = UnicodeAttribute()  # JSON {"topic": name} | {"group": name}
    rate = NumberAttribute()
    status = UnicodeAttribute()
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    found = NumberAttribute(null=True)  # null while selecting
    parts = UnicodeAttribute(null=True)  # JSON [{"key", "rows"}]: the manifest, from selection.json
    cursor = NumberAttribute(default=0)  # manifest rows done (copied, or failed for good)
    copied = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    duplicates = NumberAttribute(default=0)
    version = NumberAttribute(default=0)
    # 1: the copier may produce the chunk at ``cursor`` after the write that set it (``updated_at``);
    # 0: a clean stop (lakeq.replay.copier, "A resume after the dedup window"); absent: not known
    inflight = NumberAttribute(null=True)
    error = UnicodeAttribute(null=True)
    live = UnicodeAttribute(null=True)  # "1" while selecting or copying (the sparse index)
    send_at = NumberAttribute(null=True)  # the copier's next sending slot (epoch ms; lakeq.store.slots)
    dry_run = NumberAttribute(null=True)  # 1: a dry run (selecting → selected; never copies)
    sample = UnicodeAttribute(null=True)  # a dry run's: JSON, selection.json's ``sample``
    by_live = LiveIndex()


M = ReplayModel


@dataclass(frozen=True, slots=True)
class Replay:
    """A replay's item as the use cases read it: :class:`ReplayModel`'s attributes (its defaults
    for the counters; absent ones ``None``)."""
    id: str
    topic: str
    from_ms: int
    to_ms: int
    filter: str
    target: str
    rate: int
    status: str
    created_at: int
    updated_at: int
    found: int | None = None
    parts: str | None = None
    cursor: int = 0
    copied: int = 0
    failed: int = 0
    duplicates: int = 0
    version: int = 0
    inflight: int | None = None
    error: str | None = None
    live: str | None = None
    send_at: int | None = None
    dry_run: int | None = None
    sample: str | None = None


class ReplayRepo:
    @staticmethod
    def get(rid: str) -> Replay | None:
        try:
            return record_of(Replay, M.get(rid, consistent_read=True))
        except DoesNotExist:
            return None

    @staticmethod
    def create(r: Replay) -> bool:
        """One PutItem, if no replay has that id."""
        from pynamodb.exceptions import PutError

        from lakeq.store.writes import conditional_failed
        item = model_of(M, r)
        try:
            item.save(condition=M.id.does_not_exist())
            return True
        except PutError as e:
            if conditional_failed(e):
                return False
            raise

    @staticmethod
    def all() -> list[Replay]:
        """Every replay, newest first (a Scan: replays are few; the list route pages it)."""
        return sorted((record_of(Replay, r) for r in M.scan(consistent_read=True)),
                      key=lambda r: (-int(r.created_at), r.id))

    @staticmethod
    def live_ids() -> list[str]:
        """The ids of the replays selecting or copying (a Query of the sparse index ``live``)."""
        return sorted(r.id for r in M.by_live.query("1"))

    @staticmethod
    def selected(rid: str, version: int, found: int, parts: str, now: int) -> bool:
        """selecting → copying, with the manifest's size and parts (``inflight``: the copier produces
        next, so its first run writes no intent of its own)."""
        return update_if(M(rid), [M.status.set("copying"), M.found.set(found), M.parts.set(parts),
                                  M.inflight.set(1), M.version.add(1), M.updated_at.set(now)],
                         (M.version == version) & (M.status == "selecting"))

    @staticmethod
    def dry_selected(rid: str, version: int, found: int, sample: str, now: int) -> bool:
        """A dry run's selecting → selected (final: ``live`` stays until :meth:`unlive`), with the
        count and the sample; only if it is still selecting at ``version``."""
        return update_if(M(rid), [M.status.set("selected"), M.found.set(found), M.sample.set(sample),
                                  M.version.add(1), M.updated_at.set(now)],
                         (M.version == version) & (M.status == "selecting") & (M.dry_run == 1))

    @staticmethod
    def progress(rid: str, version: int, cursor: int, copied: int, failed: int, duplicates: int, now: int,
                 status: str = "copying", inflight: bool = True) -> bool:
        """The copier's cursor write: the counts as they are after a chunk, ``inflight``, ``version``
        + 1; only if the item is still at ``version`` and in ``status`` (``cancelled``: the chunk in
        hand when a cancel came, recorded after it)."""
        return update_if(M(rid), [M.cursor.set(cursor), M.copied.set(copied), M.failed.set(failed),
                                  M.duplicates.set(duplicates), M.inflight.set(int(inflight)), M.version.add(1),
                                  M.updated_at.set(now)],
                         (M.version == version) & (M.status == status))

    @staticmethod
    def finish(rid: str, version: int, status: str, now: int, error: str | None = None,
               expect: str = "copying") -> bool:
        """End a replay (``done`` / ``failed``; ``live`` stays until :meth:`unlive`); only if it is
        still at ``version`` and in status ``expect``."""
        actions = [M.status.set(status), M.version.add(1), M.updated_at.set(now)]
        if error is not None:
            actions.append(M.error.set(error[:1000]))
        return update_if(M(rid), actions, (M.version == version) & (M.status == expect))

    @staticmethod
    def cancel(rid: str, now: int) -> bool:
        """selecting | copying → cancelled (``version`` kept: the copier's next cursor write fails on
        the status and it stops; it records the chunk in hand with ``status="cancelled"``)."""
        return update_if(M(rid), [M.status.set("cancelled"), M.updated_at.set(now)],
                         M.status.is_in(*LIVE_STATUSES))

    @staticmethod
    def claim_slot(rid: str, now: int, until: int) -> bool:
        """The copier's next sending slot (:mod:`lakeq.store.slots`, shared by every run of the
        replay, so overlapping runs together keep its ``rate``): ``send_at`` → ``until`` if free at
        ``now``. One conditional UpdateItem."""
        return slots.claim(M(rid), M.send_at, now, until, M.id.exists())

    @staticmethod
    def slot_free_at(rid: str) -> int | None:
        """When the copier's slot frees (one consistent GetItem; None: free)."""
        return slots.free_at(M, rid, "send_at", "id")

    @staticmethod
    def unlive(rid: str) -> bool:
        """An ended replay whose target was told: out of the schedule's index."""
        return update_if(M(rid), [M.live.remove()], M.status.is_in(*FINAL) & M.live.exists())


# --- the selection job's objects in the lake bucket ---------------------------------------------
def _s3():
    from lakeq.store.bodies import s3_client
    return s3_client()


def _bucket() -> str:
    return os.environ["LAKE_BUCKET"]


def prefix(rid: str) -> str:
    return f"replays/{rid}/"


class ReplayObjects:
    @staticmethod
    def outcome(rid: str) -> tuple[dict | None, dict | None]:
        """``(selection.json, error.json)`` of replay ``rid``, each None while absent: one
        ListObjectsV2 of ``replays/<id>/`` (delimited: the manifest's parts are not listed), then a
        GetObject of the one that exists (error.json wins)."""
        p = prefix(rid)
        got = _s3().list_objects_v2(Bucket=_bucket(), Prefix=p, Delimiter="/")
        names = {o["Key"][len(p):] for o in got.get("Contents") or []}
        for name in ("error.json", "selection.json"):
            if name in names:
                obj = _s3().get_object(Bucket=_bucket(), Key=p + name)
                doc = json.loads(obj["Body"].read().decode("utf-8"))
                return (None, doc) if name == "error.json" else (doc, None)
        return None, None

    @staticmethod
    def rows(key: str) -> Iterator[dict]:
        """The rows of manifest part ``key``, streamed (one GetObject): records
        (:mod:`lakeq.store.replay_manifest`) when ``key`` ends in ``.txt``, as the job writes them since
        2026-12-07; JSON Lines otherwise (gzipped when ``key`` ends in ``.gz``, as the job wrote
        them before 2026-11-25)."""
        body = _s3().get_object(Bucket=_bucket(), Key=key)["Body"]
        with body:
            if records.is_records(key):
                yield from records.iter_rows(body.read)
                return
            if key.endswith(".gz"):
                with gzip.GzipFile(fileobj=body) as f:
                    yield from (json.loads(x) for x in f if x.strip())
                return
            # (the writer escapes \r and \n inside strings: a raw line break ends a row)
            yield from (json.loads(x) for x in body.iter_lines(chunk_size=1 << 16) if x.strip())
