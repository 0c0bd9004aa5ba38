"""The columnar lake's bookkeeping (issue 32.1, docs/guide-lake.md "Compaction"): which hours of
``raw/`` the hourly compaction job turns into Parquet, which generation it commits, and which files
a reader trusts. Pure (no AWS, no Spark): the job (``glue_jobs/lakeq_lake/compact.py``) and the
readers (``glue_jobs/lakeq_lake/store.py``) do the I/O.

Layout in the lake bucket::

    raw/kind=<k>/dt=YYYY-MM-DD/hour=HH/<shard>-<seq>-<seq>.jsonl.gz      the archiver's objects
    lake/kind=<k>/run=<run>/dt=YYYY-MM-DD/hour=HH/part-*.parquet         a compaction run's files
    lake/kind=<k>/run=<run>/dt=YYYY-MM-DD/hour=HH/bucket=NN/part-*.parquet  (messages, bodies: one
                                                                          file per hash bucket of queue)
    lake/_manifests/kind=<k>/dt=YYYY-MM-DD/hour=HH/gen=<NNNNNNNNNN>.json the hour's commits
    lake/_symlinks/kind=<k>/dt=YYYY-MM-DD/hour=HH/symlink.txt            Athena's view of the hour

An hour is compacted when a manifest names it; its newest generation (the highest ``gen``) is
the one readers trust: its ``parquet`` files hold every row of its ``raw`` keys. A raw key of the
hour not in that list (it arrived late) is read as raw until the next run folds it in (a new
generation: the previous generation's Parquet + the late raw keys). A run's files not named by a
newest manifest (a crash before the commit, or a superseded generation) are never read, and
deleted once older than :data:`KEEP_MS` — a superseded generation's also only :data:`KEEP_MS` after
the manifest that superseded it (a reader that planned on them a moment before still finds them).
The manifest is created, never overwritten (``If-None-Match: *`` on S3, a hard link locally), so
two runs cannot both commit one generation. Athena's symlink is written after the
commit, from the committed manifest; one older than its hour's newest manifest (a crash between
the two) is rewritten by the next run.

**Messages and bodies: deduplicated and bucketed.** A message is ``(topic, inc, queue, offset)``
and its hour is its own ``produced_at`` (:mod:`lakeq.lake.archive`), so every copy of a message
(a redelivered stream batch) lands in one hour: the compaction keeps one row per message and the
hour's Parquet holds each message once. It writes the hour as :data:`BUCKETS` files, bucket
``pmod(hash(queue), BUCKETS)`` (Spark's hash partitioning of ``queue``, the replay job's
manifest parts), each sorted by ``(topic, inc, queue, offset)``; the manifest records
``buckets``. A reader of whole compacted hours then needs neither a shuffle nor a duplicates' drop
(:func:`bucketed_files`); late raw keys of a compacted hour are read beside its Parquet and
deduplicated with it, until the next generation folds them in (deduplicated again, with the
previous generation's rows).

**Retention.** A day ``D`` is past retention :data:`RETAIN_DAYS` (raw/'s expiration, 400) days
after its start: the compaction no longer folds its raw keys and deletes its hours — symlinks,
Parquet, then the manifests (:func:`retired`). By the hour's date in the key names, not the
objects' age: a generation folded late holds the whole hour and goes with it. The bodies of
day ``D``'s messages (``bodies/``, 401 days after their creation, on or after ``D``, rounded up to a
midnight by S3) are not expired before ``D`` + 401 days: a day of margin for a run that fails.

**Reads per run** are bounded by the work: the plan GETs the newest manifest of the closed hours
that still have raw keys (:func:`plan_hours`; folded raw expires two days after its commit), the
garbage is decided from key names (:func:`doubtful_hours`: only an hour with files of more than one
run, old enough to delete, needs its newest manifest), and a symlink is repaired only when it is
older than its hour's newest manifest (:func:`stale_symlinks`, listed times).

>>> raw_hour("raw/kind=messages/dt=2026-01-01/hour=07/m-1-2.jsonl.gz")
('messages', '2026-01-01', '07')
>>> manifest_key("offsets", "2026-01-01", "07", 3)
'lake/_manifests/kind=offsets/dt=2026-01-01/hour=07/gen=0000000003.json'
>>> parse_manifest_key(manifest_key("offsets", "2026-01-01", "07", 3))
('offsets', '2026-01-01', '07', 3)
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

RAW = "raw"
LAKE = "lake"
MANIFESTS = f"{LAKE}/_manifests"
SYMLINKS = f"{LAKE}/_symlinks"
KINDS = ("messages", "bodies", "offsets", "members")
HOUR_MS = 3_600_000
GRACE_MS = 15 * 60_000  # an hour is closed this long after its end (the archiver's late batches)
KEEP_MS = 2 * 24 * HOUR_MS  # unreferenced Parquet / manifests are deleted this long after they were written
DAY_MS = 24 * HOUR_MS
RETAIN_DAYS = 400  # raw/'s expiration (template.yaml expire-raw); bodies/ keeps 401 (expire-bodies)
COMPACTED_TAG = ("lakeq-compacted", "true")  # on a raw object folded into a committed manifest (lifecycle)

_RAW = re.compile(r"^raw/kind=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/([^/]+)$")
_MANIFEST = re.compile(r"^lake/_manifests/kind=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/gen=(\d+)\.json$")
_SYMLINK = re.compile(r"^lake/_symlinks/kind=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/symlink\.txt$")
_RUN_FILE = re.compile(
    r"^lake/kind=([^/]+)/run=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/(?:bucket=(\d+)/)?([^/]+)$")
BUCKETED = ("messages", "bodies")  # the kinds written deduplicated, one file per hash bucket of queue
BUCKETS = 8  # files per hour of a bucketed kind (the replay job's manifest parts over compacted hours)

Hour = tuple[str, str]  # ("YYYY-MM-DD", "HH")


def visible(name: str) -> bool:
    """A data file's name as Spark and Athena see it: names starting with ``_`` or ``.`` are hidden."""
    return not name.startswith(("_", "."))


def raw_hour(key: str) -> tuple[str, str, str] | None:
    """``(kind, dt, hour)`` of a raw object's key; None for anything else (a hidden file too).

    >>> raw_hour("raw/kind=messages/dt=2026-01-01/hour=07/.x.crc") is None
    True
    """
    m = _RAW.match(key)
    return (m.group(1), m.group(2), m.group(3)) if m and visible(m.group(4)) else None


def manifest_key(kind: str, day: str, hour: str, gen: int) -> str:
    return f"{MANIFESTS}/kind={kind}/dt={day}/hour={hour}/gen={gen:010d}.json"


def parse_manifest_key(key: str) -> tuple[str, str, str, int] | None:
    m = _MANIFEST.match(key)
    return (m.group(1), m.group(2), m.group(3), int(m.group(4))) if m else None


def symlink_key(kind: str, day: str, hour: str) -> str:
    return f"{SYMLINKS}/kind={kind}/dt={day}/hour={hour}/symlink.txt"


def run_prefix(kind: str, run: str) -> str:
    return f"{LAKE}/kind={kind}/run={run}"


def parquet_hour(key: str) -> tuple[str, str, str, str] | None:
    """``(kind, run, dt, hour)`` of a run's Parquet file (``part-*.parquet``); None for anything else."""
    m = _RUN_FILE.match(key)
    if not m or not (m.group(6).startswith("part-") and m.group(6).endswith(".parquet")):
        return None
    return m.group(1), m.group(2), m.group(3), m.group(4)


def bucket_of(key: str) -> int | None:
    """The hash bucket of a bucketed kind's Parquet file (its ``bucket=NN`` folder); None for a
    file written without buckets (or anything else).

    >>> bucket_of("lake/kind=bodies/run=5-ab/dt=2026-01-01/hour=07/bucket=3/part-00001-x.c000.snappy.parquet")
    3
    >>> bucket_of("lake/kind=bodies/run=5-ab/dt=2026-01-01/hour=07/part-00001-x.c000.snappy.parquet") is None
    True
    """
    m = _RUN_FILE.match(key)
    return int(m.group(5)) if m and m.group(5) is not None and parquet_hour(key) else None


def bucketed_files(manifests: Mapping[Hour, Mapping]) -> tuple[int, dict[int, list[str]]] | None:
    """``(buckets, {bucket: its Parquet files of every hour})`` when every manifest of
    ``manifests`` was written deduplicated and bucketed alike (``buckets`` the same, each file in
    its bucket's folder): the hours can be read bucket by bucket, each bucket holding whole queues,
    without a shuffle or a duplicates' drop. None otherwise (no manifest, a manifest of the layout
    before, two bucket counts)."""
    counts = {int(m.get("buckets") or 0) for m in manifests.values()}
    if len(counts) != 1 or 0 in counts:
        return None
    (n,) = counts
    out: dict[int, list[str]] = {b: [] for b in range(n)}
    for m in manifests.values():
        for k in m.get("parquet", ()):
            b = bucket_of(k)
            if b is None or not 0 <= b < n:
                return None
            out[b].append(k)
    return n, {b: sorted(v) for b, v in out.items()}


def hour_start_ms(day: str, hour: str) -> int:
    """
    >>> hour_start_ms("2026-01-01", "01")
    1767229200000
    """
    d = dt.datetime.strptime(f"{day} {hour}", "%Y-%m-%d %H").replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp() * 1000)


def is_closed(day: str, hour: str, now_ms: int, grace_ms: int = GRACE_MS) -> bool:
    """The hour ended at least ``grace_ms`` before ``now_ms``: the compaction may fold it.

    >>> is_closed("2026-01-01", "00", 1767229200000 + 15 * 60_000)
    True
    >>> is_closed("2026-01-01", "00", 1767229200000 + 15 * 60_000 - 1)
    False
    """
    return hour_start_ms(day, hour) + HOUR_MS + grace_ms <= now_ms


def past_retention(day: str, now_ms: int, retain_days: int = RETAIN_DAYS) -> bool:
    """Day ``day`` is past the lake's retention at ``now_ms``: ``retain_days`` days after its start.

    >>> past_retention("2026-01-01", hour_start_ms("2026-01-01", "00") + 400 * DAY_MS)
    True
    >>> past_retention("2026-01-01", hour_start_ms("2026-01-01", "00") + 400 * DAY_MS - 1)
    False
    """
    return hour_start_ms(day, "00") + retain_days * DAY_MS <= now_ms


def key_hour(key: str) -> tuple[str, Hour] | None:
    """``(kind, (dt, hour))`` of a key under ``lake/`` (a run's file, a manifest, a symlink)."""
    m = _MANIFEST.match(key) or _RUN_FILE.match(key) or _SYMLINK.match(key)
    if m is None:
        return None
    if m.re is _RUN_FILE:  # (its groups: kind, run, dt, hour, bucket, name)
        return m.group(1), (m.group(3), m.group(4))
    return m.group(1), (m.group(2), m.group(3))


def retired(kind: str, keys: Iterable[str], now_ms: int,
            retain_days: int = RETAIN_DAYS) -> tuple[list[str], list[str], list[str]]:
    """The keys of ``kind`` under ``lake/`` (``keys``) of hours past retention, in the three steps
    that delete them: symlinks (Athena stops reading the hour), the runs' files, then the manifests
    last — a run that stops half-way leaves the manifests, and the next one finishes."""
    out: tuple[list[str], list[str], list[str]] = ([], [], [])
    for k in sorted(set(keys)):
        p = key_hour(k)
        if p is not None and p[0] == kind and past_retention(p[1][0], now_ms, retain_days):
            out[{"_symlinks": 0, "_manifests": 2}.get(k.split("/")[1], 1)].append(k)
    return out


def plan_hours(kind: str, raw_keys: Iterable[str], now_ms: int, grace_ms: int = GRACE_MS,
               retain_days: int = RETAIN_DAYS) -> set[Hour]:
    """The hours whose newest manifest a run needs to plan: closed, not past retention, with raw
    keys of ``kind`` (folded raw keys expire two days after the commit, so: the recent hours and
    those with late arrivals)."""
    out = set()
    for k in raw_keys:
        p = raw_hour(k)
        if p is not None and p[0] == kind and is_closed(p[1], p[2], now_ms, grace_ms) \
                and not past_retention(p[1], now_ms, retain_days):
            out.add((p[1], p[2]))
    return out


def newest_manifests(keys: Iterable[str], kind: str | None = None) -> dict[Hour, str]:
    """The newest manifest key of each hour (the highest generation) among ``keys``."""
    best: dict[Hour, tuple[int, str]] = {}
    for k in keys:
        p = parse_manifest_key(k)
        if p is None or (kind is not None and p[0] != kind):
            continue
        h = (p[1], p[2])
        if h not in best or p[3] > best[h][0]:
            best[h] = (p[3], k)
    return {h: k for h, (_, k) in best.items()}


def manifest_doc(kind: str, day: str, hour: str, gen: int, run: str, parquet: Iterable[str],
                 raw: Iterable[str], committed_at: int, buckets: int = 0) -> dict:
    """The manifest of one hour's generation: its Parquet files and the raw keys they hold;
    ``buckets`` (a bucketed kind's files: deduplicated, one per hash bucket of ``queue``) when
    written so."""
    doc = {"kind": kind, "dt": day, "hour": hour, "generation": gen, "run": run,
           "parquet": sorted(parquet), "raw": sorted(set(raw)), "committed_at": committed_at}
    if buckets:
        doc["buckets"] = buckets
    return doc


@dataclass(frozen=True)
class Work:
    """One hour a compaction run writes: generation ``gen`` = the previous Parquet (``previous``
    manifest, or none) + the raw keys ``late`` (not in it)."""
    kind: str
    day: str
    hour: str
    gen: int
    late: tuple[str, ...]
    previous: Mapping | None = field(default=None, compare=False)

    @property
    def raw(self) -> list[str]:
        """Every raw key the new generation holds."""
        return sorted(set(self.late) | set((self.previous or {}).get("raw", ())))

    @property
    def previous_parquet(self) -> list[str]:
        return list((self.previous or {}).get("parquet", ()))


def plan(kind: str, raw_keys: Iterable[str], manifests: Mapping[Hour, Mapping], now_ms: int,
         grace_ms: int = GRACE_MS, retain_days: int = RETAIN_DAYS) -> list[Work]:
    """The hours of ``kind`` a run compacts: each closed hour not past retention with a raw key its
    newest manifest (``manifests``: hour → manifest document) does not name — never compacted, or
    late arrivals. Hours in key order."""
    by_hour: dict[Hour, list[str]] = {}
    for k in raw_keys:
        p = raw_hour(k)
        if p is not None and p[0] == kind:
            by_hour.setdefault((p[1], p[2]), []).append(k)
    out = []
    for (day, hour), keys in sorted(by_hour.items()):
        if not is_closed(day, hour, now_ms, grace_ms) or past_retention(day, now_ms, retain_days):
            continue
        prev = manifests.get((day, hour))
        done = set((prev or {}).get("raw", ()))
        late = tuple(sorted(k for k in keys if k not in done))
        if late:
            out.append(Work(kind, day, hour, int((prev or {}).get("generation", 0)) + 1, late, prev))
    return out


def unread(raw_keys: Iterable[str], manifests: Mapping[Hour, Mapping]) -> tuple[list[str], list[str]]:
    """What a reader reads: ``(parquet, raw)`` — the newest manifests' Parquet files and the raw
    keys no newest manifest of their hour names (the open hour, the hours not compacted yet, late
    arrivals)."""
    parquet = sorted(k for m in manifests.values() for k in m.get("parquet", ()))
    raw = []
    for k in raw_keys:
        p = raw_hour(k)
        if p is None:
            continue
        m = manifests.get((p[1], p[2]))
        if m is None or k not in set(m.get("raw", ())):
            raw.append(k)
    return parquet, sorted(raw)


def doubtful_hours(kind: str, written: Mapping[str, int], now_ms: int, keep_ms: int = KEEP_MS) -> set[Hour]:
    """The hours whose garbage cannot be told from key names: a manifest names the hour and Parquet
    files of more than one run are there, one of them old enough to delete (a superseded
    generation, a run that crashed or lost its commit). :func:`garbage` needs their newest
    manifest; every other hour is decided without reading one."""
    committed = set(newest_manifests(written, kind))
    runs: dict[Hour, set[str]] = {}
    old: set[Hour] = set()
    for k, mtime in written.items():
        p = parquet_hour(k)
        if p is None or p[0] != kind:
            continue
        runs.setdefault((p[2], p[3]), set()).add(p[1])
        if now_ms - mtime >= keep_ms:
            old.add((p[2], p[3]))
    return {h for h in old if h in committed and len(runs[h]) > 1}


def garbage(kind: str, written: Mapping[str, int], now_ms: int, keep_ms: int = KEEP_MS,
            known: Mapping[Hour, Mapping] | None = None) -> list[str]:
    """Keys of ``kind`` to delete: ``written`` (key → last-modified ms, the listing of
    ``lake/kind=<kind>/`` and ``lake/_manifests/kind=<kind>/``) older than ``keep_ms`` that no
    newest manifest names — from the key names: a superseded manifest (a lower generation), a file
    of an hour no manifest names (its run crashed before the commit), a run's file that is no
    Parquet part (``_SUCCESS``); and a Parquet file of an hour in ``known`` (hour → its newest
    manifest, at least the :func:`doubtful_hours`) that its manifest does not name. An hour with
    files of one run only is presumed live (a generation without rows names no file, so a crashed
    run's files there wait for the hour's next generation). What a newer generation superseded (its
    manifest, its Parquet) waits ``keep_ms`` after *that* manifest too: a generation written days
    before a late batch superseded it is old at once, and a reader that listed the manifests just
    before the commit is still reading it."""
    newest = newest_manifests(written, kind)

    def settled(h: Hour) -> bool:  # the hour's newest manifest is keep_ms old: what it superseded may go
        return now_ms - written.get(newest[h], now_ms) >= keep_ms
    gen_of = {h: (parse_manifest_key(k) or ("", "", "", 0))[3] for h, k in newest.items()}
    named = {h: set(m.get("parquet", ())) for h, m in (known or {}).items()
             if h in gen_of and int(m.get("generation", -1)) == gen_of[h]}
    out = []
    for k, mtime in written.items():
        if now_ms - mtime < keep_ms:
            continue
        pm = parse_manifest_key(k)
        if pm is not None:
            if pm[0] == kind and newest.get((pm[1], pm[2])) != k and settled((pm[1], pm[2])):
                out.append(k)
            continue
        if not k.startswith(f"{LAKE}/kind={kind}/run="):
            continue
        p = parquet_hour(k)
        h = (p[2], p[3]) if p else None
        if p is None or h not in newest or (h in named and k not in named[h] and settled(h)):
            out.append(k)
    return sorted(out)


def stale_symlinks(kind: str, manifests: Mapping[str, int], symlinks: Mapping[str, int]) -> dict[Hour, str]:
    """Hour → its newest manifest key, for the hours whose symlink is missing or older than that
    manifest (``manifests``, ``symlinks``: key → last-modified ms): a run stopped between its
    commit and the symlink. The symlink is written after the commit, so it is never older when all
    went well."""
    out = {}
    for h, k in newest_manifests(manifests, kind).items():
        at = symlinks.get(symlink_key(kind, *h))
        if at is None or at < manifests[k]:
            out[h] = k
    return out


def untagged(raw_keys: Iterable[str], manifests: Mapping[Hour, Mapping], now_ms: int,
             keep_ms: int = KEEP_MS) -> list[str]:
    """Raw keys a newest manifest committed more than ``keep_ms`` + a day ago names that are still
    there: the lifecycle rule expires a tagged one two days after its tag, so the run that
    committed them stopped before tagging them. The next run tags them again."""
    out = []
    for k in raw_keys:
        p = raw_hour(k)
        m = manifests.get((p[1], p[2])) if p else None
        if m is not None and now_ms - int(m.get("committed_at", now_ms)) > keep_ms + DAY_MS \
                and k in set(m.get("raw", ())):
            out.append(k)
    return sorted(out)


def symlink_text(root: str, parquet: Iterable[str]) -> str:
    """Athena's symlink file of an hour (SymlinkTextInputFormat): one full path per line."""
    return "".join(f"{root.rstrip('/')}/{k}\n" for k in sorted(parquet))


def in_hours(key_hour: Hour, lo: str | None, hi: str | None) -> bool:
    """``key_hour`` within ``["YYYY-MM-DD HH" lo, hi]`` (None: unbounded).

    >>> in_hours(("2026-01-01", "07"), "2026-01-01 07", "2026-01-01 08")
    True
    """
    k = f"{key_hour[0]} {key_hour[1]}"
    return (lo is None or lo <= k) and (hi is None or k <= hi)
