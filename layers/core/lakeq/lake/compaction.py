"""The columnar lake's bookkeeping (issue 32.1, docs/guide-lake.md "Compaction"): which hours of
``raw/`` the hourly compaction job turns into Parquet, which generation it commits, and which files
a reader trusts. Pure (no AWS, no Spark): the job (``glue_jobs/lakeq_lake/compact.py``) and the
readers (``glue_jobs/lakeq_lake/store.py``) do the I/O.

Layout in the lake bucket::

    raw/kind=<k>/dt=YYYY-MM-DD/hour=HH/<shard>-<seq>-<seq>.jsonl.gz      the archiver's objects
    lake/kind=<k>/run=<run>/dt=YYYY-MM-DD/hour=HH/part-*.parquet         a compaction run's files
    lake/_manifests/kind=<k>/dt=YYYY-MM-DD/hour=HH/gen=<NNNNNNNNNN>.json the hour's commits
    lake/_symlinks/kind=<k>/dt=YYYY-MM-DD/hour=HH/symlink.txt            Athena's view of the hour

An hour is compacted when a manifest names it; its newest generation (the highest ``gen``) is
the one readers trust: its ``parquet`` files hold every row of its ``raw`` keys. A raw key of the
hour not in that list (it arrived late) is read as raw until the next run folds it in (a new
generation: the previous generation's Parquet + the late raw keys). A run's files not named by a
newest manifest (a crash before the commit, or a superseded generation) are never read, and
deleted once older than :data:`KEEP_MS` (a reader that planned on them a moment before still finds
them). The manifest is created, never overwritten (``If-None-Match: *`` on S3, a hard link
locally), so two runs cannot both commit one generation.

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
COMPACTED_TAG = ("lakeq-compacted", "true")  # on a raw object folded into a committed manifest (lifecycle)

_RAW = re.compile(r"^raw/kind=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/([^/]+)$")
_MANIFEST = re.compile(r"^lake/_manifests/kind=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/gen=(\d+)\.json$")
_RUN_FILE = re.compile(r"^lake/kind=([^/]+)/run=([^/]+)/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/([^/]+)$")

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
    if not m or not (m.group(5).startswith("part-") and m.group(5).endswith(".parquet")):
        return None
    return m.group(1), m.group(2), m.group(3), m.group(4)


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
                 raw: Iterable[str], committed_at: int) -> dict:
    """The manifest of one hour's generation: its Parquet files and the raw keys they hold."""
    return {"kind": kind, "dt": day, "hour": hour, "generation": gen, "run": run,
            "parquet": sorted(parquet), "raw": sorted(set(raw)), "committed_at": committed_at}


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
         grace_ms: int = GRACE_MS) -> list[Work]:
    """The hours of ``kind`` a run compacts: each closed hour with a raw key its newest manifest
    (``manifests``: hour → manifest document) does not name — never compacted, or late arrivals.
    Hours in key order."""
    by_hour: dict[Hour, list[str]] = {}
    for k in raw_keys:
        p = raw_hour(k)
        if p is not None and p[0] == kind:
            by_hour.setdefault((p[1], p[2]), []).append(k)
    out = []
    for (day, hour), keys in sorted(by_hour.items()):
        if not is_closed(day, hour, now_ms, grace_ms):
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


def garbage(kind: str, written: Mapping[str, int], manifest_keys: Iterable[str], live: Iterable[str],
            now_ms: int, keep_ms: int = KEEP_MS) -> list[str]:
    """Keys of ``kind`` to delete: ``written`` (key → last-modified ms) under ``lake/kind=<kind>/``
    and ``lake/_manifests/kind=<kind>/`` that are neither ``live`` (the newest manifests and their
    Parquet files) nor younger than ``keep_ms`` — files of runs that crashed before their commit,
    superseded generations and their manifests."""
    live = set(live)
    newest = set(newest_manifests(manifest_keys, kind).values())
    out = []
    for k, mtime in written.items():
        if k in live or k in newest or now_ms - mtime < keep_ms:
            continue
        if k.startswith(f"{LAKE}/kind={kind}/run=") or (parse_manifest_key(k) or ("",))[0] == kind:
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
