"""The per-minute gauges the metrics function (``functions/metrics``, rate(1 minute)) prints as
CloudWatch embedded metric format: what SQS publishes for every queue, computed from the store with
the operator summary's core (:func:`lakeq.console.summary.oldest_at`, the consumers' queue views).

Rows (names in :mod:`lakeq.common.metric_names`):

- per (topic, clustering group granted it) — dimensions ``Topic``, ``Group``: visible (backlog not
  locked), not visible (locked by a pull: in flight), backlog, age of the oldest unsettled message
  (ms), dead-lettered so far (cumulative);
- per client and topic subscribed — ``Subscriber`` + ``Topic``: the same five over the client's
  subscriptions' message lists to that topic, summed (the age: the oldest). Not per subscription id:
  ids are a key's to mint (create, wait for a run, delete), each a new metric; a run reads all of a
  client's subscriptions to a topic or none, and the row is printed only when each of them was read;
- per topic read — ``Topic``: delayed messages not yet in a queue;
- the totals — ``service`` only: the five summed (age: the oldest), delayed, and the run's
  ``MetricsPublisherRows`` / ``MetricsPublisherTruncated``. The totals of the five and delayed are
  printed only by a run that covered every row (a partial sum would look like a drop);
- what the alarms watch — ``service`` only, in the same document, both printed by **every** run
  from every row as last read (the run's state, :func:`remember`), so the alarms see the whole
  deployment each minute however many rows it has: ``AlarmedAgeOfOldestMessage``, the oldest
  unsettled message's age; ``AlarmedBacklogGrowingMinutes``, the longest run of minutes over which
  a row's backlog grew at each of its reads (each row against its own reads: one tenant's drain
  offsets nobody's growth; a row that appears with a backlog, or goes, is no growth). Left out of
  both: the rows of muted clients (the admin's ``PATCH /v1/clients/{name}`` ``{"alarms": false}``:
  a tenant's stale group must not hold the shared alarms; its rows are still published as rows)
  and the rows of dead-letter topics (some client's ``dead_letter_topic``, or a subscription's the
  admin key named — one its subscriber's key named gets copies only while the client's names it: the
  dead-letter alarm covers what arrives there, and a muted client's dead letters would page
  through them). (The dead-letter alarm's figure is counted where a message is dead-lettered,
  ``AlarmedMessagesDeadLettered``, :func:`lakeq.consume.settle.flush_due`.)

Which rows are printed (``detail``, the function's ``LAKEQ_METRICS_DETAIL``, template parameter
``MetricsDetail``): ``active`` (the default) — a (topic, group) or subscription row only while it
has a backlog, a topic row only while it has delayed messages, the totals always (a CloudWatch
metric costs only in the hours it receives data, so an idle topic costs no metric; its reads
are below); ``all`` — every
row every minute; ``totals`` — the totals only (a fixed count whatever the number of topics). Every
row is computed in each mode (the totals need them).

Per queue nothing is published (a topic has up to 64: ``GET /v1/topics/{topic}`` shows them);
no (topic, group) row for a broadcasting group (its offsets are per instance); its
subscriptions have their rows like any consumer's.

Bounded work: a run reads at most :data:`MAX_ROWS` rows, whole units (a pair, or a client's
subscriptions to one topic): those read longest ago first, by the state (:func:`schedule`; a row
never read before all), so past ``MAX_ROWS`` rows each is read every ``ceil(rows / MAX_ROWS)``
minutes, a run cut by its deadline leaves its unread rows first for the next, and no key's
subscriptions moving in and out shifts another row out of its turn (a position-based page did).
The totals are printed only when the run read every row (a part's sum is not the deployment's; the
alarms' figures are, from the state). A run stops at its ``deadline`` (epoch ms); a row whose reads
raise is logged and left out, the rows after it still computed: either way
``MetricsPublisherTruncated`` is 1 (rows due this turn were not read; reading part of the rows by
design is 0; so is it, past one page, when the state could not be read: the run then reads page
``minute mod pages`` by position and the alarms' figures cover that page only). Store reads per row: as the
summary's but cheaper: one BatchGetItem of a topic's queue items, once per topic, their
``max_offset`` hints as they are (``exact=False``: no Query of each queue's newest segment; the
SegmentsTable stream's head mover keeps the hints within seconds, so a backlog may show a few
seconds late); one Query of the consumer's offset records; one Query per queue with a backlog for
the oldest message. An idle row reads no segment. Per run: the topics', clients' and subscriptions'
Scans, eventually consistent, the clients' and subscriptions' projected to the attributes used
(``CLIENT_ATTRIBUTES``, ``SUB_ATTRIBUTES``: no key hash, push URL, header or secret is read). The
store is not written; the function reads and writes its state (one S3 object,
:class:`lakeq.store.metrics.MetricsStateRepo`: ~55 bytes a row, its names hashed).
"""
from __future__ import annotations

import base64
import hashlib
import logging
from dataclasses import dataclass, field
from itertools import groupby
from typing import Callable

from lakeq.common import clock as _clock
from lakeq.common import metric_names as M
from lakeq.common.errors import counted
from lakeq.common.names import ancestors, log_of
from lakeq.console.summary import oldest_at
from lakeq.consume import views_of
from lakeq.store.catalog import ClientRepo, TopicRepo
from lakeq.store.metrics import MetricsStateRepo
from lakeq.store.offsets import OffsetRepo
from lakeq.store.queue_log import LogRepo
from lakeq.store.subscriptions import SubscriptionRepo, list_owner, list_topic

_log = logging.getLogger("lakeq.console.gauges")

MAX_ROWS = 500  # (topic, group) pairs + subscriptions published per run
STATE_VERSION = 3
DETAILS = ("active", "all", "totals")
MINUTE_MS = 60_000
CLIENT_ATTRIBUTES = ["name", "role", "mode", "topics", "alarms_muted", "dead_letter_topic"]
SUB_ATTRIBUTES = ["id", "subscriber", "topic", "dead_letter_topic", "dead_letter_by"]


@dataclass
class Gauges:
    """What one run computed: ``rows`` (dimensions, values) to print, one per row and per topic
    read, then the totals row (``{}``: service only)."""

    rows: list[tuple[dict, dict]] = field(default_factory=list)
    total_rows: int = 0       # every row that exists (all pages)
    published: int = 0        # consumer rows computed by this run (printed: as ``detail`` says)
    truncated: bool = False   # not every row computed (more than a page, or the page cut): no totals
    cut: bool = False         # rows of the run's own page left out (its deadline, a row's failed reads)
    state: dict = field(default_factory=dict)  # for the next run (remember)
    state_saved: bool = False  # by run(): False when it could not be read, or another run wrote it


def consumer_values(log: str, vs: list, now: int) -> dict:
    """The five gauges of one consumer over the queue views ``vs`` of ``log``."""
    backlog = sum(v.backlog for v in vs)
    in_flight = 0
    for v in vs:
        s = v.state()
        if s.live(now):
            in_flight += len(s.held)
    in_flight = min(in_flight, backlog)
    oldest = [o for o in (oldest_at(log, v.queue, v.start, v.max_offset) for v in vs if v.backlog > 0)
              if o is not None]
    age = max(0, now - int(min(oldest))) if oldest else 0
    return {M.VISIBLE: backlog - in_flight, M.NOT_VISIBLE: in_flight, M.BACKLOG: backlog,
            M.AGE: age, M.DEAD_LETTERED: sum(v.dead_lettered for v in vs)}


def pairs(topics: list, consumers: list) -> list[tuple]:
    """The (topic, clustering consumer) rows, in topic then consumer order: a consumer whose grant
    covers the topic. A grant covers a topic exactly when it is one of the topic's
    :func:`~lakeq.common.names.ancestors`, so the consumers are looked up by those (work: topics x
    depth + rows), not every grant of every consumer tested against every topic."""
    by_grant: dict[str, dict[str, object]] = {}
    for c in consumers:
        if c.mode != "broadcasting":
            for g in c.topics:
                by_grant.setdefault(g, {})[c.name] = c
    out: list[tuple] = []
    for t in topics:
        found: dict[str, object] = {}
        for a in ancestors(t.name):
            found.update(by_grant.get(a, {}))
        out += [("pair", t, found[n]) for n in sorted(found)]
    return out


def compute(now: int | None = None, deadline: int | None = None, max_rows: int = MAX_ROWS,
            detail: str = "active", *, sink: Callable[[tuple[dict, dict]], object] | None = None,
            previous: dict | None = None, state_lost: bool = False) -> Gauges:
    """The run's rows (:class:`Gauges`); ``sink(row)`` is also called with each row as soon as it is
    computed (the metrics function prints it then: a run the Lambda timeout cuts keeps what it printed).
    ``previous``: the state the last run left (:func:`remember`; ``Gauges.state`` is this run's);
    ``state_lost``: it could not be read, so past one page the alarms' figures cover this run's page
    only (``MetricsPublisherTruncated`` is then 1: the alarms' view of the other pages is missing)."""
    if detail not in DETAILS:
        raise ValueError(f"metrics detail {detail!r}: one of {', '.join(DETAILS)}")
    now = _clock.now() if now is None else now
    topics = sorted(TopicRepo.all(), key=lambda t: t.name)
    # only the attributes used: the scans return no tenant's keys or push secrets
    consumers = sorted((c for c in ClientRepo.all(attributes=CLIENT_ATTRIBUTES) if c.role == "consumer"),
                       key=lambda c: c.name)
    # a broadcasting group has no (topic, group) row (its offsets are per instance); its
    # subscriptions' lists are one consumer's like any other's
    pair_rows: list[tuple] = pairs(topics, consumers)
    subs = {c.name: c for c in consumers}
    listed = SubscriptionRepo.all(consistent=False, attributes=SUB_ATTRIBUTES)
    listed = sorted(listed, key=lambda s: (s.subscriber, s.topic or "", s.id))
    sub_rows = [("sub", s, subs[s.subscriber]) for s in listed if s.subscriber in subs]
    rows = pair_rows + sub_rows
    # a page holds whole units: a pair, or a client's subscriptions to one topic (published as one
    # row, per Subscriber and Topic: a subscription id is a key's to mint, so it is no dimension)
    units = [[r] for r in pair_rows] + [list(g) for _, g in groupby(sub_rows, key=lambda r: (r[1].subscriber,
                                                                                             r[1].topic))]
    out = Gauges(total_rows=len(rows))
    key_of = {id(r): row_key(*r) for r in rows}  # each row's name in the state, hashed once a run
    book = paginate(units, max_rows)
    pages = max(1, len(book))
    minute = now // MINUTE_MS
    if remembered_rows(previous) is not None and not state_lost:  # the rows read longest ago first
        mine = schedule(units, previous, max_rows, minute, key=lambda r: key_of[id(r)])
    else:  # no state: page `minute mod pages`, its first unit rotating by the page's turn
        mine = book[minute % pages] if book else []
        if mine:
            first = (minute // pages) % len(mine)
            mine = mine[first:] + mine[:first]
    todo = [r for u in mine for r in u]
    left = {(u[0][1].subscriber, u[0][1].topic): len(u) for u in mine if u[0][0] == "sub"}
    agg: dict[tuple, dict | None] = {}
    out.truncated = pages > 1
    metas: dict[str, list] = {}
    totals = dict.fromkeys(M.CONSUMER_GAUGES, 0)
    seen: dict[str, tuple[int, int | None]] = {}
    delayed = 0
    errors: dict = {}
    for r in todo:
        kind, a, b = r
        if deadline is not None and _clock.now() >= deadline:
            out.truncated = out.cut = True
            break
        got = None
        # one row's failed read (a throttled Query past the retries) skips that row only: the rows
        # after it and the age the alarm watches are still printed; the run counts as truncated
        with counted(errors, _log, "metrics: the row of %s / %s failed; left out of this run",
                     getattr(a, "name", None) or a.id, b.name):
            if kind == "pair":
                log = log_of(a)
                if a.name not in metas:
                    metas[a.name] = LogRepo.queues(log, int(a.queues), exact=False)
                    n = sum(int(m.delayed or 0) for m in metas[a.name])
                    delayed += n
                    if detail == "all" or (detail == "active" and n):
                        _put(out, sink, ({"Topic": a.name}, {M.DELAYED: n}))
                vs = views_of(metas[a.name], OffsetRepo.records(OffsetRepo.owner(b.name, log)))
                dims = {"Topic": a.name, "Group": b.name}
            else:
                log = list_topic(a.id)
                vs = views_of(LogRepo.queues(log, 1, exact=False), OffsetRepo.records(list_owner(a.id)))
                dims = {"Subscriber": a.subscriber, "Topic": a.topic}
            got = dims, consumer_values(log, vs, now)
        if kind == "sub":  # the unit's row once its last subscription is read; not if one failed
            unit = (a.subscriber, a.topic)
            left[unit] -= 1
            agg[unit] = None if got is None or (unit in agg and agg[unit] is None) else merge(agg.get(unit), got[1])
            if left[unit] == 0 and agg[unit] is not None and (detail == "all" or (detail == "active"
                                                                                 and agg[unit][M.BACKLOG])):
                _put(out, sink, (got[0], agg[unit]))
        if got is None:
            out.truncated = out.cut = True
            continue
        dims, vals = got
        if kind == "pair" and (detail == "all" or (detail == "active" and vals[M.BACKLOG])):
            _put(out, sink, (dims, vals))
        out.published += 1
        for k, v in vals.items():
            totals[k] = max(totals[k], v) if k == M.AGE else totals[k] + v
        seen[key_of[id(r)]] = (vals[M.BACKLOG], now - vals[M.AGE] if vals[M.AGE] else None)
    # what the alarms watch: from every row as last read (this run's rows fresh, the others as the
    # state remembers them), so they see the whole deployment each minute however many rows it has.
    # Left out of them: a muted client's rows, and the rows of dead-letter topics (the dead-letter
    # alarm covers what arrives there; a muted client's dead letters would page through them); a
    # subscription's own dead-letter topic counts only when the admin key named it: one its key named
    # receives copies only while the client's setting names it (lakeq.consume.settle.granted), and that
    # setting is in the set already; once the admin moves it, the key's stale name excludes nothing
    dlq = ({c.dead_letter_topic for c in consumers}
           | {s.dead_letter_topic for s in listed if s.dead_letter_by == "admin"}) - {None}
    out_of_alarms = {key_of[id(r)]: bool(r[2].alarms_muted) or (r[1].name if r[0] == "pair" else r[1].topic) in dlq
                     for r in rows}
    out.state, age, growing = remember(previous, out_of_alarms, seen, minute, now, pages)
    run = {M.PUBLISHER_ROWS: out.published, M.PUBLISHER_TRUNCATED: int(out.cut or (state_lost and pages > 1)),
           M.ALARMED_AGE: age, M.ALARMED_GROWING: growing}
    if not out.truncated:  # sums: comparable between runs over the same rows only
        run = {**totals, M.DELAYED: delayed, **run}
    _put(out, sink, ({}, run))
    return out


def paginate(units: list[list], max_rows: int) -> list[list[list]]:
    """Whole units into pages of at most ``max_rows`` rows, in order (a unit longer than that —
    100 subscriptions at most, the per-client cap — is a page of its own).

    >>> [[len(u) for u in p] for p in paginate([[1], [1, 1], [1], [1, 1, 1], [1]], 3)]
    [[1, 2], [1], [3], [1]]
    """
    book: list[list[list]] = []
    n = 0
    for u in units:
        if not book or n + len(u) > max_rows:
            book.append([])
            n = 0
        book[-1].append(u)
        n += len(u)
    return book


def merge(acc: dict | None, vals: dict) -> dict:
    """Two consumers' gauges as one row: counts summed, the age the oldest."""
    if acc is None:
        return dict(vals)
    return {k: max(acc[k], v) if k == M.AGE else acc[k] + v for k, v in vals.items()}


def run(now: int | None = None, deadline: int | None = None, detail: str = "active", *,
        sink: Callable[[tuple[dict, dict]], object] | None = None) -> Gauges:
    """The metrics function's run: :func:`compute` from the state the last run left
    (:class:`~lakeq.store.metrics.MetricsStateRepo`), then this run's state saved, if no other run
    wrote it in between. A state that cannot be read (S3 unreachable) is neither used nor saved: the
    gauges are printed all the same, the alarms' figures from this run's rows only (past one page
    ``MetricsPublisherTruncated`` says so: its alarm)."""
    try:
        previous, etag = MetricsStateRepo.load()
        loaded = True
    except Exception:
        _log.exception("metrics: the state could not be read; this run neither uses nor saves it")
        previous, etag, loaded = None, None, False
    out = compute(now=now, deadline=deadline, detail=detail, sink=sink, previous=previous, state_lost=not loaded)
    out.state_saved = loaded and MetricsStateRepo.put(out.state, etag)
    return out


def row_key(kind: str, a, b) -> str:
    """A row's key in the state: 12 characters of a hash of its names (a row's names may be 400
    characters; the state is read and written every minute).

    >>> len(row_key("sub", type("S", (), {"id": "x" * 200})(), None))
    12
    """
    name = f"p\t{a.name}\t{b.name}" if kind == "pair" else f"s\t{a.id}"
    return base64.urlsafe_b64encode(hashlib.blake2b(name.encode("utf-8"), digest_size=9).digest()).decode()


def remembered_rows(previous) -> dict | None:
    """The rows of a state written by this version (:func:`remember`), or None."""
    if isinstance(previous, dict) and previous.get("v") == STATE_VERSION and isinstance(previous.get("rows"), dict):
        return previous["rows"]
    return None


def schedule(units: list[list], previous: dict | None, max_rows: int, minute: int,
             key: Callable[[tuple], str] = lambda r: row_key(*r)) -> list[list]:
    """The units this run reads: those read longest ago first (a unit's last read: its rows'
    oldest; a row never read counts as read the minute before a run first listed it — this run for
    one listed now — so a new subscription waits its turn behind the rows read before it appeared), in their
    order on ties, until ``max_rows`` rows (at least one unit); ``key``: a row's key in the state.
    By what the state (``previous``,
    :func:`remember`) says and not by position, so a key that adds and removes subscriptions moves
    no other row out of its turn, and a run cut by its deadline leaves its unread rows first for the
    next run.

    >>> from types import SimpleNamespace as N
    >>> units = [[("pair", N(name=t), N(name="g"))] for t in "abcd"]
    >>> k = [row_key(*u[0]) for u in units]
    >>> state = {"v": STATE_VERSION, "rows": {k[0]: [0, None, 5, None, 0], k[2]: [0, None, 3, None, 0]},
    ...          "listed": {k[1]: 4}}
    >>> [u[0][1].name for u in schedule(units, state, 2, 9)]  # b listed at 4 (counts as 3), c read at 3
    ['b', 'c']
    >>> [u[0][1].name for u in schedule(units, state, 3, 9)]  # then a (read at 5), before d (new: 8)
    ['b', 'c', 'a']
    """
    rows = remembered_rows(previous) or {}
    listed = remembered_listed(previous)

    def last(u: list) -> int:  # a row listed at minute m and not read yet counts as read at m - 1
        out = minute
        for r in u:
            k = key(r)
            e = _entry(rows.get(k))
            out = min(out, e[2] if e is not None else listed.get(k, minute) - 1)
        return out

    order = sorted(range(len(units)), key=lambda i: (last(units[i]), i))
    out, n = [], 0
    for i in order:
        if out and n + len(units[i]) > max_rows:
            break
        out.append(units[i])
        n += len(units[i])
    return out


def remembered_listed(previous) -> dict:
    """When each row not yet read was first listed (``{key: minute}``) in a state of this version."""
    if remembered_rows(previous) is None or not isinstance(previous.get("listed"), dict):
        return {}
    return {k: v for k, v in previous["listed"].items() if type(v) is int}


def _entry(e) -> list | None:
    """A remembered row ``[backlog, oldest ms | None, minute read, growing since minute | None,
    growing reads]`` as written, or None."""
    if (isinstance(e, list) and len(e) == 5 and all(x is None or type(x) is int for x in e)
            and e[0] is not None and e[2] is not None and e[4] is not None):
        return e
    return None


def remember(previous: dict | None, out_of_alarms: dict[str, bool], seen: dict[str, tuple[int, int | None]],
             minute: int, now: int, pages: int = 1) -> tuple[dict, int, int]:
    """The state a run leaves for the next, and what the alarms watch, from the state it read
    (``previous``: None when there is none), the rows that exist (``out_of_alarms``: key → left out
    of the alarms) and those it computed (``seen``: key → (backlog, oldest unsettled message's epoch
    ms or None)). Returns ``(state, age, growing)``:

    - ``state``: ``{"v": 3, "rows": {key: [backlog, oldest, minute read, growing since, growing
      reads]}, "listed": {key: minute first listed}}`` for the rows that exist only (a deleted row
      is forgotten), a computed row refreshed, the others as remembered (a minute ahead of this
      run's — a clock stepped back — counts as this minute); ``listed``: the rows not read yet, for
      :func:`schedule`; ``growing reads``: how many reads in a row found the backlog larger than
      the read before, ``growing since`` the minute of the read before the first of them (None, 0:
      the last read found it no larger; a gap between two reads longer than ``2 * pages + 5``
      minutes — the function paused, the clock jumped — starts afresh);
    - ``age``: ms since the oldest message of any row in the alarms, as last read (a row drained
      since counts until its next read; one whose reads keep failing keeps counting: its
      ``MetricsPublisherTruncated`` is the alarm that says why);
    - ``growing``: the longest such run over the rows in the alarms, from ``growing since`` to the
      row's last read (minutes; 0: none), counted once it holds at least two growing reads (one
      larger read over a long interval is no trend), a row not read for ``2 * pages + 5`` minutes
      left out (its growth is not known). One row's drain does not offset another's growth: each
      row's backlog is judged against its own reads."""
    old = remembered_rows(previous) or {}
    was_listed = remembered_listed(previous)
    gap = 2 * pages + 5
    rows: dict[str, list] = {}
    listed: dict[str, int] = {}
    for k in out_of_alarms:
        p = _entry(old.get(k))
        if p is not None and p[2] > minute:  # a clock stepped back: as if read this minute
            p = [p[0], p[1], minute, None if p[3] is None else min(p[3], minute), p[4]]
        if k in seen:
            backlog, oldest = seen[k]
            since, n = None, 0
            if p is not None and p[2] == minute:  # a second read this minute: less than the first ends the run
                since, n = (p[3], p[4]) if backlog >= p[0] else (None, 0)
            elif p is not None and minute - p[2] <= gap and backlog > p[0]:
                since, n = (p[2], 1) if p[3] is None else (p[3], p[4] + 1)
            rows[k] = [backlog, oldest, minute, since, n]
        elif p is not None:
            rows[k] = p
        else:
            listed[k] = min(was_listed.get(k, minute), minute)
    alarmed = [r for k, r in rows.items() if not out_of_alarms[k]]
    age = max((now - r[1] for r in alarmed if r[1] is not None), default=0)
    growing = max((r[2] - r[3] for r in alarmed if r[3] is not None and r[4] >= 2 and minute - r[2] <= gap),
                  default=0)
    return {"v": STATE_VERSION, "rows": rows, "listed": listed}, max(0, age), growing


def _put(out: Gauges, sink, row: tuple[dict, dict]) -> None:
    out.rows.append(row)
    if sink is not None:
        sink(row)
