"""A DynamoDB Streams pump: what Lambda's event source mappings do on AWS, for the local stack.

For every ``DynamoDB`` event of a function in ``template.yaml`` the pump reads the table's stream
from moto (``describe_stream`` → shards → ``get_shard_iterator`` at the event's
``StartingPosition`` → ``get_records``) and calls the function's handler with Lambda's event shape
``{"Records": [{eventID, eventName, eventVersion, eventSource, awsRegion, dynamodb, eventSourceARN}]}``:

- batches of at most ``BatchSize`` records and at most Lambda's 6 MB invocation payload
  (:func:`within_payload`), waiting up to ``MaximumBatchingWindowInSeconds`` for a
  batch to fill, in order per shard;
- the position (checkpoint) moves only after the handler returns; on an exception the same batch is
  retried with exponential backoff; with ``FunctionResponseTypes: [ReportBatchItemFailures]`` a
  ``{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}]}`` answer checkpoints before the
  lowest failed record and retries from it (an identifier that is not in the batch, empty or null
  fails the whole batch, as on AWS);
- the mapping's error handling, as Lambda documents it: ``BisectBatchOnFunctionError`` halves a
  batch whose invocation raised (splitting does not consume the retry quota) until the failing
  record is alone; ``MaximumRetryAttempts`` retries (beyond the first attempt) of the records at the
  head, then they are discarded; ``MaximumRecordAgeInSeconds`` discards records older than that
  (by ``ApproximateCreationDateTime``) before they are sent. A discarded batch's metadata (shard,
  first/last sequence number, size, condition ``RetryAttemptsExhausted`` / ``RecordAgeExceeded``)
  goes to ``DestinationConfig.OnFailure`` (an SQS queue of the template, on moto) in Lambda's
  on-failure record format, and to :attr:`Mapping_.discarded`;
- one thread for the whole stack (:meth:`StreamPump.start`), and :meth:`StreamPump.drain` that pumps
  until every shard is caught up (for tests and batch jobs; :class:`Pumps` drains several pumps as
  one, exposed by the gateway as ``POST /_local/streams/drain``).

moto keeps every stream record and every shard iterator in memory, so the poll interval backs off
to ``idle_interval`` while nothing happens. With a ``write_signal`` (the local stack's: moto's
count of DynamoDB writes, :func:`moto_write_signal`) an idle pump instead sleeps until a write
happened since its last pass began (a stream record only appears through a write): what it delivers
and when is unchanged, an idle stack no longer polls every shard several times a second.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import aws_rules, interceptor, moto_plain
from . import template as tpl_mod
from .handlers import HandlerCache, LambdaContext, add_to_sys_path
from .template import FunctionSpec, StreamEvent

log = logging.getLogger("lakeq.local.streams")


def streams_client(**kwargs: Any) -> Any:
    import boto3
    from botocore.config import Config

    # account-based stream endpoints (<account>.streams-ddb…) are unknown to moto 5.2.5
    cfg = Config(account_id_endpoint_mode="disabled", retries={"max_attempts": 2})
    return boto3.client("dynamodbstreams", config=cfg, **kwargs)


def lambda_record(record: Mapping[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """A boto3 ``get_records`` record → the record Lambda hands to a function."""
    ddb = dict(record.get("dynamodb") or {})
    t = ddb.get("ApproximateCreationDateTime")
    if isinstance(t, dt.datetime):
        ddb["ApproximateCreationDateTime"] = int(t.timestamp())
    for key in ("Keys", "NewImage", "OldImage"):
        if key in ddb:
            ddb[key] = {k: _attr_json(v) for k, v in ddb[key].items()}
    return {
        "eventID": record.get("eventID"),
        "eventName": record.get("eventName"),
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": ddb,
        "eventSourceARN": stream_arn,
    }


def _attr_json(value: Any) -> Any:
    """boto3's AttributeValue (bytes for B/BS) → the JSON form Lambda uses (base64 strings)."""
    if not isinstance(value, Mapping):
        return value
    out = {}
    for t, v in value.items():
        if t == "B" and isinstance(v, (bytes, bytearray)):
            out[t] = base64.b64encode(v).decode("ascii")
        elif t == "BS":
            out[t] = [base64.b64encode(x).decode("ascii") if isinstance(x, (bytes, bytearray)) else x
                      for x in v]
        elif t == "M":
            out[t] = {k: _attr_json(x) for k, x in v.items()}
        elif t == "L":
            out[t] = [_attr_json(x) for x in v]
        else:
            out[t] = v
    return out


@dataclass
class ShardState:
    shard_id: str
    iterator: str | None = None
    buffer: list[dict] = field(default_factory=list)  # read, not yet delivered (in order)
    first_buffered_at: float | None = None
    attempts: int = 0  # failed attempts of the batch at the head of the buffer
    limit: int | None = None  # batch size while a failed batch is being bisected (None: BatchSize)
    split_until: int | None = None  # sequence number of the last record of the batch being bisected
    retry_at: float = 0.0
    checkpoint: str | None = None  # SequenceNumber of the last record handled
    last_read: str | None = None  # SequenceNumber of the last record read into the buffer
    closed: bool = False
    at_end: bool = False  # the last read found no record after last_read (or the shard closed)


@dataclass
class Mapping_:
    """One event source mapping: a function fed by one table's stream."""

    spec: FunctionSpec
    event: StreamEvent
    table_name: str
    stream_arn: str | None = None
    shards: dict[str, ShardState] = field(default_factory=dict)
    delivered: int = 0
    discarded: list[dict] = field(default_factory=list)  # on-failure records sent (or not) so far
    # the store's write counts (this table's, and of writes naming no table we could read) when a pass
    # began that read every shard of this mapping to its end: while they stay, nothing new is there
    seen: tuple[int, int] | None = None


class StreamPump:
    def __init__(
        self,
        template: Any = None,
        *,
        stack_name: str = tpl_mod.LOCAL_STACK,
        parameters: Mapping[str, Any] | None = None,
        dynamodb_client: Any = None,
        streams_client_: Any = None,
        handler_cache: HandlerCache | None = None,
        handlers: Mapping[str, Callable] | None = None,
        region: str | None = None,
        busy_interval: float = 0.05,
        idle_interval: float = 0.5,
        max_backoff: float = 5.0,
        sqs_client: Any = None,
        clock: Callable[[], float] = time.time,
        select: Callable[[StreamEvent], bool] | None = None,
        write_signal: Callable[[int | None, float], int | None] | None = None,
    ):
        import boto3

        self.template = tpl_mod.load_template(template)
        self.ctx = tpl_mod.make_context(self.template, stack_name, parameters, region=region)
        self.region = self.ctx.region
        self.ddb = dynamodb_client or boto3.client("dynamodb", region_name=self.region)
        self.streams = streams_client_ or streams_client(region_name=self.region)
        self.handler_cache = handler_cache or HandlerCache()
        self.handler_overrides = dict(handlers or {})
        self.busy_interval = busy_interval
        self.idle_interval = idle_interval
        self.max_backoff = max_backoff
        self._sqs = sqs_client
        self.clock = clock  # wall clock (epoch seconds) for MaximumRecordAgeInSeconds
        # write_signal(after, wait): the store's write count, once it differs from ``after`` (at
        # most ``wait`` seconds later); None when it cannot tell (then the pump polls)
        self.write_signal = write_signal
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.mappings: list[Mapping_] = []
        names = tpl_mod.table_names(self.ctx)
        for spec in tpl_mod.functions(self.ctx):
            for ev in spec.stream_events:
                if ev.enabled and ev.table in names and (select is None or select(ev)):
                    self.mappings.append(Mapping_(spec, ev, names[ev.table]))
        # one thread serves its mappings in turn (on AWS each polls its shards by itself): the
        # mappings without a batching window (the wake-up notifier) go first in each pass, so
        # they do not wait behind another function's invocation for the same records; the local
        # stack gives them a pump (a thread) of their own (``select``)
        self.mappings.sort(key=lambda m: m.event.batching_window_s > 0)
        add_to_sys_path(tpl_mod.layer_dirs(self.template))

    # ------------------------------------------------------------------ public
    def start(self) -> "StreamPump":
        if self._thread is None and self.mappings:
            self._thread = threading.Thread(target=self._run, name="lakeq-stream-pump", daemon=True)
            self._thread.start()
        return self

    def stop_soon(self) -> None:
        """Ask the thread to stop without waiting (:meth:`stop` then waits less: an idle pump
        notices within ``IDLE_WAIT_S``)."""
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def drain(self, timeout: float = 30.0) -> tuple[bool, int]:
        """Pump (without batching windows) until every shard is read to its end and every read record
        is handled. Returns ``(drained, records delivered meanwhile)``; ``drained`` is False when
        ``timeout`` passed first (e.g. a handler keeps failing)."""
        deadline = time.monotonic() + timeout
        total = 0
        while True:
            with self.lock:
                read, delivered, pending = self.pump_once(flush=True)
            total += delivered
            if read == 0 and delivered == 0 and pending == 0:
                return True, total
            if time.monotonic() >= deadline:
                return False, total
            if delivered == 0 and pending:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def skip_to_end(self) -> int:
        """Every shard's position to its end, without delivering what is buffered or unread (the
        local stack's reset: records of the wiped items must not reach a function). Returns how
        many records were skipped."""
        skipped = 0
        with self.lock:
            for m in self.mappings:
                try:
                    self._refresh_shards(m)
                except Exception as exc:  # noqa: BLE001 - no stream (yet)
                    log.debug("stream of %s not ready: %s", m.table_name, exc)
                    continue
                for shard in m.shards.values():
                    skipped += len(shard.buffer)
                    shard.buffer.clear()
                    shard.first_buffered_at = None
                    shard.attempts, shard.limit, shard.split_until, shard.retry_at = 0, None, None, 0.0
                    while not shard.closed:
                        try:
                            out = self.streams.get_records(ShardIterator=self._iterator(m, shard), Limit=1000)
                        except Exception as exc:  # noqa: BLE001
                            log.debug("get_records on %s failed: %s", m.table_name, exc)
                            shard.iterator = None
                            break
                        records = out.get("Records", [])
                        shard.iterator = out.get("NextShardIterator")
                        if shard.iterator is None:
                            shard.closed = True
                        if not records:
                            break
                        skipped += len(records)
                        shard.last_read = shard.checkpoint = records[-1]["dynamodb"].get("SequenceNumber")
                    shard.checkpoint = shard.last_read or shard.checkpoint
        return skipped

    def pump_once(self, flush: bool = False, tables: Mapping[str, int] | None = None) -> tuple[int, int, int]:
        """One pass over every mapping: read new records, deliver due batches. ``tables``: the
        store's write counts per table taken before this pass (``write_signal``'s ``tables``): a
        mapping whose table was not written since a pass read all its shards to their end reads
        none (None: every shard is read).

        Returns ``(records read, records delivered, records still pending)``."""
        read = delivered = pending = 0
        for m in self.mappings:
            try:
                self._refresh_shards(m)
            except Exception as exc:  # noqa: BLE001 - table may not exist yet
                log.debug("stream of %s not ready: %s", m.table_name, exc)
                m.seen = None
                continue
            key = None if tables is None else (int(tables.get(m.table_name, 0)), int(tables.get("*", 0)))
            skip = key is not None and m.seen == key
            for shard in m.shards.values():
                if not skip:
                    read += self._read(m, shard)
                delivered += self._deliver(m, shard, flush)
                pending += len(shard.buffer)
            if not skip:  # every shard read to its end: what the counts hold is buffered or delivered
                m.seen = key if key is not None and m.shards and all(s.at_end for s in m.shards.values()) else None
        return read, delivered, pending

    # ------------------------------------------------------------------ internals
    def _run(self) -> None:
        interval = self.busy_interval
        # the store's write count before a pass began (None: no signal, poll): every stream record
        # written up to that count was there for the pass to read
        writes = self._writes(None, 0.0)
        while not self._stop.is_set():
            tables = getattr(self.write_signal, "tables", None) if writes is not None else None
            try:
                with self.lock:
                    read, delivered, pending = self.pump_once(flush=False, tables=tables)
            except Exception:  # noqa: BLE001
                log.exception("stream pump pass failed")
                read = delivered = pending = 0
            if read or delivered:
                interval = self.busy_interval
            elif pending:
                interval = self.busy_interval
            else:
                interval = min(self.idle_interval, interval * 2)
                if writes is not None:
                    # idle: sleep until a write the last pass may have missed, then keep at
                    # least the polling cadence's interval between passes
                    ended = time.monotonic()
                    now = self._writes(writes, IDLE_WAIT_S)
                    while now == writes and time.monotonic() - ended < IDLE_PASS_S:
                        now = self._writes(writes, IDLE_WAIT_S)  # (None once stopping)
                    if now is not None:
                        writes = now
                        rest = interval - (time.monotonic() - ended)
                        if rest > 0 and self._stop.wait(rest):
                            break
                        continue
            if self._stop.wait(interval):
                break
            # the counts before the next pass (its gate: pump_once's ``tables``); one counter read,
            # where the pass without it reads every mapping's shards
            writes = self._writes(None, 0.0)

    def _writes(self, after: int | None, wait: float) -> int | None:
        if self.write_signal is None or self._stop.is_set():
            return None
        try:
            return self.write_signal(after, wait)
        except Exception as exc:  # noqa: BLE001 - moto gone (stopping): poll
            log.debug("write signal failed: %s", exc)
            return None

    def _refresh_shards(self, m: Mapping_) -> None:
        if m.stream_arn is None:
            desc = self.ddb.describe_table(TableName=m.table_name)["Table"]
            arn = desc.get("LatestStreamArn")
            if not arn:
                raise RuntimeError(f"{m.table_name} has no stream")
            m.stream_arn = arn
            m.shards = {}
        if m.shards and all(not s.closed for s in m.shards.values()):
            # moto has one open shard per table; AWS may split shards: re-describe rarely
            return
        kwargs: dict[str, Any] = {"StreamArn": m.stream_arn}
        while True:
            d = self.streams.describe_stream(**kwargs)["StreamDescription"]
            for sh in d.get("Shards", []):
                if sh["ShardId"] not in m.shards:
                    m.shards[sh["ShardId"]] = ShardState(sh["ShardId"])
            last = d.get("LastEvaluatedShardId")
            if not last:
                break
            kwargs["ExclusiveStartShardId"] = last

    def _iterator(self, m: Mapping_, shard: ShardState) -> str:
        if shard.iterator is None:
            after = shard.last_read or shard.checkpoint
            if after is not None:
                it = self.streams.get_shard_iterator(
                    StreamArn=m.stream_arn, ShardId=shard.shard_id,
                    ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
            else:
                pos = m.event.starting_position.upper()
                pos = pos if pos in ("TRIM_HORIZON", "LATEST") else "LATEST"
                it = self.streams.get_shard_iterator(
                    StreamArn=m.stream_arn, ShardId=shard.shard_id, ShardIteratorType=pos)
            shard.iterator = it["ShardIterator"]
        return shard.iterator

    def _read(self, m: Mapping_, shard: ShardState) -> int:
        shard.at_end = shard.closed
        if shard.closed:
            return 0
        if len(shard.buffer) >= max(m.event.batch_size, 1) * 4:
            return 0  # enough read ahead
        try:
            out = self.streams.get_records(ShardIterator=self._iterator(m, shard), Limit=1000)
        except Exception as exc:  # noqa: BLE001 - expired iterator, table recreated…
            log.debug("get_records on %s failed: %s", m.table_name, exc)
            shard.iterator = None
            m.stream_arn = None if "ResourceNotFound" in type(exc).__name__ else m.stream_arn
            return 0
        records = out.get("Records", [])
        shard.iterator = out.get("NextShardIterator")
        shard.at_end = not records
        if shard.iterator is None:
            shard.closed = True
        elif not records and (shard.last_read or shard.checkpoint) and not SHARDS_KEPT:
            # moto restores a table from a deep copy when a transaction is cancelled, stream shard
            # included: an iterator taken before then reads the discarded copy and never sees a new
            # record. So, when caught up, take a fresh iterator after the last record read (unless
            # moto_speed's journal keeps the shard: SHARDS_KEPT).
            shard.iterator = None
        if records:
            shard.last_read = records[-1]["dynamodb"].get("SequenceNumber")
            if not shard.buffer:
                shard.first_buffered_at = time.monotonic()
            shard.buffer.extend(lambda_record(r, m.stream_arn, self.region) for r in records)
        return len(records)

    def _call(self, m: Mapping_, event: dict, ctx: LambdaContext) -> Any:
        # the invocation runs as the function: its AWS calls are checked against its role
        # (infra/local/aws_rules.py; a worker process acts as its function by itself)
        with interceptor.acting_as(m.spec.logical_id):
            fn = self.handler_overrides.get(m.spec.logical_id)
            if fn is not None:
                return fn(event, ctx)
            with self.handler_cache.instance(m.spec) as handler:
                return handler(event, ctx)

    def _deliver(self, m: Mapping_, shard: ShardState, flush: bool) -> int:
        delivered = 0
        now = time.monotonic()
        ev = m.event
        while shard.buffer:
            if shard.retry_at > now:
                break
            size = shard.limit or max(ev.batch_size, 1)
            full = len(shard.buffer) >= max(ev.batch_size, 1)
            waited = now - (shard.first_buffered_at or now)
            if not (flush or full or waited >= ev.batching_window_s or shard.attempts or shard.limit):
                break
            expired = self._expired(m, shard.buffer[:size])
            if expired:
                self._discard(m, shard, expired, "RecordAgeExceeded")
                continue
            batch = within_payload(shard.buffer[:size])
            ok_count, raised = self._invoke(m, batch)
            if ok_count > 0:
                del shard.buffer[:ok_count]
                shard.checkpoint = batch[ok_count - 1]["dynamodb"].get("SequenceNumber")
                delivered += ok_count
                m.delivered += ok_count
                shard.first_buffered_at = time.monotonic() if shard.buffer else None
                if shard.split_until is not None and _seq(shard.checkpoint) >= shard.split_until:
                    shard.limit = shard.split_until = None  # past the bisected batch: full batches again
            if ok_count == len(batch):
                shard.attempts = 0
                shard.retry_at = 0.0
                continue
            failing = batch[ok_count:]
            if raised and ev.bisect_on_error and len(failing) > 1:
                # BisectBatchOnFunctionError: retry the first half; splitting is not a retry
                shard.limit = (len(failing) + 1) // 2
                last = _seq(failing[-1]["dynamodb"].get("SequenceNumber"))
                shard.split_until = max(shard.split_until or last, last)
                shard.retry_at = 0.0
                continue
            shard.attempts = 1 if ok_count > 0 else shard.attempts + 1
            retries = ev.maximum_retry_attempts
            if retries >= 0 and shard.attempts > retries:
                log.error("%s: discarding %d record(s) of %s after %d retries",
                          m.spec.logical_id, len(failing), m.table_name, retries)
                self._discard(m, shard, failing, "RetryAttemptsExhausted")
                continue
            shard.retry_at = time.monotonic() + min(self.max_backoff, 0.05 * 2 ** (shard.attempts - 1))
            break
        return delivered

    def _expired(self, m: Mapping_, batch: list[dict]) -> list[dict]:
        """The records at the head of ``batch`` older than ``MaximumRecordAgeInSeconds``."""
        age = m.event.maximum_record_age_s
        if age < 0:
            return []
        now = self.clock()
        out = []
        for r in batch:
            created = r["dynamodb"].get("ApproximateCreationDateTime")
            if created is None or now - float(created) <= age:
                break
            out.append(r)
        return out

    def _discard(self, m: Mapping_, shard: ShardState, records: list[dict], condition: str) -> None:
        """Give up on ``records`` (the head of the buffer): checkpoint past them and send their
        metadata to the on-failure destination, as Lambda does."""
        assert records and shard.buffer[: len(records)] == records
        del shard.buffer[: len(records)]
        shard.checkpoint = records[-1]["dynamodb"].get("SequenceNumber")
        shard.first_buffered_at = time.monotonic() if shard.buffer else None
        invokes = shard.attempts if condition == "RetryAttemptsExhausted" else 0
        shard.attempts = 0
        shard.retry_at = 0.0
        if shard.split_until is not None and _seq(shard.checkpoint) >= shard.split_until:
            shard.limit = shard.split_until = None
        times = [r["dynamodb"].get("ApproximateCreationDateTime") for r in records]
        def iso(t):
            return (dt.datetime.fromtimestamp(float(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                    if t is not None else None)
        info = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": f"arn:aws:lambda:{self.region}:{self.ctx.account_id}:function:"
                               f"{m.spec.function_name}",
                "condition": condition,
                "approximateInvokeCount": invokes,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST",
                                "functionError": "Unhandled" if invokes else None},
            "version": "1.0",
            "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "DDBStreamBatchInfo": {
                "shardId": shard.shard_id,
                "startSequenceNumber": records[0]["dynamodb"].get("SequenceNumber"),
                "endSequenceNumber": records[-1]["dynamodb"].get("SequenceNumber"),
                "approximateArrivalOfFirstRecord": iso(times[0]),
                "approximateArrivalOfLastRecord": iso(times[-1]),
                "batchSize": len(records),
                "streamArn": m.stream_arn,
            },
        }
        m.discarded.append(info)
        dest = m.event.on_failure
        if not dest:
            log.error("%s: %d record(s) of %s discarded (%s); no on-failure destination",
                      m.spec.logical_id, len(records), m.table_name, condition)
            return
        try:
            sqs = self._sqs_client()
            url = sqs.get_queue_url(QueueName=str(dest).rsplit(":", 1)[-1])["QueueUrl"]
            with interceptor.acting_as(m.spec.logical_id):  # Lambda sends it with the function's role
                sqs.send_message(QueueUrl=url, MessageBody=json.dumps(info))
        except Exception:  # noqa: BLE001 - the records are gone either way; say so loudly
            log.exception("%s: could not send the on-failure record to %s: %s",
                          m.spec.logical_id, dest, json.dumps(info))

    def _sqs_client(self) -> Any:
        if self._sqs is None:
            import boto3

            self._sqs = boto3.client("sqs", region_name=self.region)
        return self._sqs

    def _invoke(self, m: Mapping_, batch: list[dict]) -> tuple[int, bool]:
        """Call the handler; returns (how many records from the head of ``batch`` are done,
        whether the invocation raised — a function error, which bisection reacts to)."""
        event = {"Records": batch}
        ctx = LambdaContext(m.spec, self.region, self.ctx.account_id)
        try:
            result = self._call(m, event, ctx)
        except Exception as exc:  # noqa: BLE001
            trace = getattr(exc, "trace", "")
            if trace:
                log.error("%s failed on %d record(s) of %s; will retry: %s\n%s",
                          m.spec.logical_id, len(batch), m.table_name, exc, trace)
            else:
                log.exception("%s failed on %d record(s) of %s; will retry",
                              m.spec.logical_id, len(batch), m.table_name)
            return 0, True
        if "ReportBatchItemFailures" not in m.event.function_response_types:
            return len(batch), False
        failures = (result or {}).get("batchItemFailures") if isinstance(result, Mapping) else None
        if not failures:
            return len(batch), False
        seqs = [r["dynamodb"].get("SequenceNumber") for r in batch]
        idx = []
        for f in failures:
            ident = (f or {}).get("itemIdentifier") if isinstance(f, Mapping) else None
            if ident not in seqs:
                log.warning("%s: invalid batchItemFailures %r; retrying the whole batch",
                            m.spec.logical_id, failures)
                return 0, False
            idx.append(seqs.index(ident))
        first = min(idx)
        log.warning("%s: %d record(s) reported failed; retrying from %s",
                    m.spec.logical_id, len(batch) - first, seqs[first])
        return first, False


class Pumps:
    """Several pumps drained as one (the local stack's two: the batching-window mappings and the
    latency-bound ones): :meth:`drain` drains each in turn until a round in which none delivered a
    record. A pump's pass holds its lock while it calls a handler, so once each is drained no
    invocation it started is still running (a push run in flight after the drain pulled a message
    produced after it: tests/e2e/test_push_group_stream_e2e.py, seen once on a loaded CI)."""

    def __init__(self, *pumps: Any):
        self.pumps = [p for p in pumps if p is not None]

    def drain(self, timeout: float = 30.0) -> tuple[bool, int]:
        deadline = time.monotonic() + timeout
        total = 0
        while True:
            moved = 0
            for p in self.pumps:
                drained, n = p.drain(max(0.0, deadline - time.monotonic()))
                moved += n
                if not drained:
                    return False, total + moved
            total += moved
            if moved == 0:
                return True, total
            if time.monotonic() >= deadline:
                return False, total


IDLE_WAIT_S = 1.0  # an idle pump's longest wait for a write (and for stop())
IDLE_PASS_S = 10.0  # and a pass at least this often all the same
# moto_speed's journal keeps a table's stream shard through a cancelled transaction (moto's own code
# puts a deep copy back), so an iterator taken at a shard's end reads what is appended after it;
# with moto as it is (LAKEQ_MOTO_PLAIN=1) the pump takes a fresh iterator after each empty read
SHARDS_KEPT = not moto_plain()


def moto_write_signal(moto_url: str) -> Callable[[int | None, float], int | None]:
    """``write_signal`` for a pump whose store is ``python -m infra.local.moto_serial`` at
    ``moto_url``: its ``GET /_lakeq/dynamodb-writes`` long poll."""
    import urllib.request

    from .moto_serial import WRITES_PATH

    def signal(after: int | None, wait: float) -> int | None:
        q = f"wait={wait}" + ("" if after is None else f"&after={after}")
        with urllib.request.urlopen(f"{moto_url}{WRITES_PATH}?{q}", timeout=wait + 10) as r:
            got = json.loads(r.read())
        signal.tables = got.get("tables")  # the same answer's count per table (StreamPump's gate)
        return int(got["writes"])

    signal.tables = None
    return signal


def within_payload(batch: list[dict]) -> list[dict]:
    """The longest head of ``batch`` whose event ``{"Records": [...]}`` fits Lambda's 6 MB
    invocation payload (at least one record), as an event source mapping cuts its batches."""
    limit = aws_rules.LAMBDA_REQUEST_LIMIT
    total = len('{"Records":[]}')
    for i, r in enumerate(batch):
        total += aws_rules.invocation_request_size(r) + (1 if i else 0)
        if total > limit:
            return batch[: max(i, 1)]
    return batch


def _seq(sequence_number: Any) -> int:
    """Stream sequence numbers are decimal strings: compare them as numbers."""
    return int(sequence_number or 0)
