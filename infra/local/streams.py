"""A DynamoDB Streams pump: what Lambda's event source mappings do on AWS, for the local stack.

For every ``DynamoDB`` event of a function in ``template.yaml`` the pump reads the table's stream
from moto (``describe_stream`` → shards → ``get_shard_iterator`` at the event's
``StartingPosition`` → ``get_records``) and calls the function's handler with Lambda's event shape
``{"Records": [{eventID, eventName, eventVersion, eventSource, awsRegion, dynamodb, eventSourceARN}]}``:

- batches of at most ``BatchSize`` records, waiting up to ``MaximumBatchingWindowInSeconds`` for a
  batch to fill, in order per shard;
- the position (checkpoint) moves only after the handler returns; on an exception the same batch is
  retried with exponential backoff (up to ``MaximumRetryAttempts`` if declared, else forever);
  with ``FunctionResponseTypes: [ReportBatchItemFailures]`` a ``{"batchItemFailures":
  [{"itemIdentifier": <SequenceNumber>}]}`` answer checkpoints before the first failed record and
  retries from it;
- one thread for the whole stack (:meth:`StreamPump.start`), and :meth:`StreamPump.drain` that pumps
  until every shard is caught up (for tests and batch jobs; exposed by the gateway as
  ``POST /_local/streams/drain``).

moto keeps every stream record and every shard iterator in memory, so the poll interval backs off
to ``idle_interval`` while nothing happens.
"""
from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

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
    retry_at: float = 0.0
    checkpoint: str | None = None  # SequenceNumber of the last record handled
    last_read: str | None = None  # SequenceNumber of the last record read into the buffer
    closed: bool = False


@dataclass
class Mapping_:
    """One event source mapping: a function fed by one table's stream."""

    spec: FunctionSpec
    event: StreamEvent
    table_name: str
    stream_arn: str | None = None
    shards: dict[str, ShardState] = field(default_factory=dict)
    delivered: int = 0


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
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.mappings: list[Mapping_] = []
        names = tpl_mod.table_names(self.ctx)
        for spec in tpl_mod.functions(self.ctx):
            for ev in spec.stream_events:
                if ev.enabled and ev.table in names:
                    self.mappings.append(Mapping_(spec, ev, names[ev.table]))
        add_to_sys_path(tpl_mod.layer_dirs(self.template))

    # ------------------------------------------------------------------ public
    def start(self) -> "StreamPump":
        if self._thread is None and self.mappings:
            self._thread = threading.Thread(target=self._run, name="lakeq-stream-pump", daemon=True)
            self._thread.start()
        return self

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

    def pump_once(self, flush: bool = False) -> tuple[int, int, int]:
        """One pass over every mapping: read new records, deliver due batches.

        Returns ``(records read, records delivered, records still pending)``."""
        read = delivered = pending = 0
        for m in self.mappings:
            try:
                self._refresh_shards(m)
            except Exception as exc:  # noqa: BLE001 - table may not exist yet
                log.debug("stream of %s not ready: %s", m.table_name, exc)
                continue
            for shard in m.shards.values():
                read += self._read(m, shard)
                delivered += self._deliver(m, shard, flush)
                pending += len(shard.buffer)
        return read, delivered, pending

    # ------------------------------------------------------------------ internals
    def _run(self) -> None:
        interval = self.busy_interval
        while not self._stop.is_set():
            try:
                with self.lock:
                    read, delivered, pending = self.pump_once(flush=False)
            except Exception:  # noqa: BLE001
                log.exception("stream pump pass failed")
                read = delivered = pending = 0
            if read or delivered:
                interval = self.busy_interval
            elif pending:
                interval = self.busy_interval
            else:
                interval = min(self.idle_interval, interval * 2)
            self._stop.wait(interval)

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
        if shard.iterator is None:
            shard.closed = True
        elif not records and (shard.last_read or shard.checkpoint):
            # moto restores a table from a deep copy when a transaction is cancelled, stream shard
            # included: an iterator taken before then reads the discarded copy and never sees a new
            # record. So, when caught up, take a fresh iterator after the last record read.
            shard.iterator = None
        if records:
            shard.last_read = records[-1]["dynamodb"].get("SequenceNumber")
            if not shard.buffer:
                shard.first_buffered_at = time.monotonic()
            shard.buffer.extend(lambda_record(r, m.stream_arn, self.region) for r in records)
        return len(records)

    def _call(self, m: Mapping_, event: dict, ctx: LambdaContext) -> Any:
        fn = self.handler_overrides.get(m.spec.logical_id)
        if fn is not None:
            return fn(event, ctx)
        with self.handler_cache.instance(m.spec) as handler:
            return handler(event, ctx)

    def _deliver(self, m: Mapping_, shard: ShardState, flush: bool) -> int:
        delivered = 0
        now = time.monotonic()
        while shard.buffer:
            if shard.retry_at > now:
                break
            size = max(m.event.batch_size, 1)
            full = len(shard.buffer) >= size
            waited = now - (shard.first_buffered_at or now)
            if not (flush or full or waited >= m.event.batching_window_s or shard.attempts):
                break
            batch = shard.buffer[:size]
            ok_count = self._invoke(m, batch)
            if ok_count > 0:
                del shard.buffer[:ok_count]
                shard.checkpoint = batch[ok_count - 1]["dynamodb"].get("SequenceNumber")
                delivered += ok_count
                m.delivered += ok_count
                shard.first_buffered_at = time.monotonic() if shard.buffer else None
            if ok_count == len(batch):
                shard.attempts = 0
                shard.retry_at = 0.0
                continue
            shard.attempts += 1
            limit = m.event.maximum_retry_attempts
            if limit >= 0 and shard.attempts > limit:
                skipped = shard.buffer[: len(batch) - ok_count]
                log.error("%s: dropping %d record(s) of %s after %d retries",
                          m.spec.logical_id, len(skipped), m.table_name, limit)
                del shard.buffer[: len(skipped)]
                shard.checkpoint = skipped[-1]["dynamodb"].get("SequenceNumber")
                shard.attempts = 0
                shard.retry_at = 0.0
                continue
            shard.retry_at = time.monotonic() + min(self.max_backoff, 0.05 * 2 ** (shard.attempts - 1))
            break
        return delivered

    def _invoke(self, m: Mapping_, batch: list[dict]) -> int:
        """Call the handler; returns how many records from the head of ``batch`` are done."""
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
            return 0
        if "ReportBatchItemFailures" not in m.event.function_response_types:
            return len(batch)
        failures = (result or {}).get("batchItemFailures") if isinstance(result, Mapping) else None
        if not failures:
            return len(batch)
        seqs = [r["dynamodb"].get("SequenceNumber") for r in batch]
        idx = []
        for f in failures:
            ident = (f or {}).get("itemIdentifier") if isinstance(f, Mapping) else None
            if ident not in seqs:
                log.warning("%s: invalid batchItemFailures %r; retrying the whole batch",
                            m.spec.logical_id, failures)
                return 0
            idx.append(seqs.index(ident))
        first = min(idx)
        log.warning("%s: %d record(s) reported failed; retrying from %s",
                    m.spec.logical_id, len(batch) - first, seqs[first])
        return first
