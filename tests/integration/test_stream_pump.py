"""infra.local.streams: the DynamoDB-streams pump on in-process moto, with a throwaway function."""
from __future__ import annotations

import io
import json
import textwrap
import time

import pytest

from infra.local import template as T
from infra.local.streams import StreamPump
from tests.handlers import sqs_messages

# moto: these tests read DynamoDB Streams (the stream pump, the fan-out, the archiver), which the memory store has not
pytestmark = pytest.mark.moto

HANDLER = textwrap.dedent('''
    import json, os

    def lambda_handler(event, context):
        with open(os.environ["PUMP_OUT"], "a") as fh:
            fh.write(json.dumps({"n": len(event["Records"]), "records": event["Records"],
                                 "fn": context.function_name}) + "\\n")
''')


def make_template(tmp_path, *, position="TRIM_HORIZON", batch=10, window=0, report=False, retries=None,
                  bisect=False, max_age=None, dlq=False):
    props = {"Stream": {"Fn::GetAtt": ["EventsTable", "StreamArn"]}, "StartingPosition": position,
             "BatchSize": batch, "MaximumBatchingWindowInSeconds": window}
    if report:
        props["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
    if retries is not None:
        props["MaximumRetryAttempts"] = retries
    if bisect:
        props["BisectBatchOnFunctionError"] = True
    if max_age is not None:
        props["MaximumRecordAgeInSeconds"] = max_age
    if dlq:
        props["DestinationConfig"] = {"OnFailure": {"Destination": {"Fn::GetAtt": ["FailQueue", "Arn"]}}}
    tpl = {
        "Resources": {
            "EventsTable": {"Type": "AWS::DynamoDB::Table", "Properties": {
                "TableName": {"Fn::Sub": "${AWS::StackName}-events"},
                "BillingMode": "PAY_PER_REQUEST",
                "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"},
                                         {"AttributeName": "n", "AttributeType": "N"}],
                "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"},
                              {"AttributeName": "n", "KeyType": "RANGE"}],
                "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"}}},
            "SinkFunction": {"Type": "AWS::Serverless::Function", "Properties": {
                "CodeUri": "sink/", "Handler": "app.lambda_handler",
                "Events": {"Events": {"Type": "DynamoDB", "Properties": props}}}},
            "FailQueue": {"Type": "AWS::SQS::Queue", "Properties": {
                "QueueName": {"Fn::Sub": "${AWS::StackName}-fail"}, "SqsManagedSseEnabled": True}},
        }
    }
    (tmp_path / "sink").mkdir(exist_ok=True)
    (tmp_path / "sink" / "app.py").write_text(HANDLER)
    (tmp_path / "template.yaml").write_text(json.dumps(tpl))
    return T.load_template(tmp_path / "template.yaml")


@pytest.fixture
def stack(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("PUMP_OUT", str(tmp_path / "out.jsonl"))

    def build(**kw):
        tpl = make_template(tmp_path, **kw)
        T.create_tables(aws["dynamodb"], tpl, "pump")
        T.create_queues(aws["sqs"], tpl, "pump")
        return tpl

    return build


def put(aws, start, count):
    for n in range(start, start + count):
        aws["dynamodb"].put_item(TableName="pump-events", Item={"k": {"S": "a"}, "n": {"N": str(n)},
                                                                 "b": {"B": b"\x00\xff"}})


def delivered(tmp_path):
    path = tmp_path / "out.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def numbers(batches):
    return [int(r["dynamodb"]["NewImage"]["n"]["N"]) for b in batches for r in b["records"]]


def test_handler_from_code_uri_gets_lambda_shaped_batches_in_order(aws, stack, tmp_path):
    tpl = stack(batch=10)
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"])
    put(aws, 0, 25)
    assert pump.drain(10) == (True, 25)
    batches = delivered(tmp_path)
    assert [b["n"] for b in batches] == [10, 10, 5]
    assert numbers(batches) == list(range(25))
    rec = batches[0]["records"][0]
    assert set(rec) == {"eventID", "eventName", "eventVersion", "eventSource", "awsRegion",
                        "dynamodb", "eventSourceARN"}
    assert rec["eventName"] == "INSERT" and rec["eventSource"] == "aws:dynamodb"
    assert rec["awsRegion"] == "us-east-1"
    arn = aws["dynamodb"].describe_table(TableName="pump-events")["Table"]["LatestStreamArn"]
    assert rec["eventSourceARN"] == arn
    d = rec["dynamodb"]
    assert d["Keys"] == {"k": {"S": "a"}, "n": {"N": "0"}}
    assert d["NewImage"]["b"] == {"B": "AP8="}  # base64, as in Lambda's JSON event
    assert isinstance(d["ApproximateCreationDateTime"], int)
    assert d["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    assert batches[0]["fn"] == "pump-SinkFunction"
    seqs = [int(r["dynamodb"]["SequenceNumber"]) for b in batches for r in b["records"]]
    assert seqs == sorted(seqs)
    # checkpoint: only new records next time
    [shard] = pump.mappings[0].shards.values()
    assert shard.checkpoint == str(seqs[-1])
    aws["dynamodb"].update_item(TableName="pump-events", Key={"k": {"S": "a"}, "n": {"N": "3"}},
                                UpdateExpression="SET x = :x", ExpressionAttributeValues={":x": {"S": "y"}})
    assert pump.drain(10) == (True, 1)
    last = delivered(tmp_path)[-1]["records"]
    assert [r["eventName"] for r in last] == ["MODIFY"]
    assert "OldImage" in last[0]["dynamodb"] and last[0]["dynamodb"]["NewImage"]["x"] == {"S": "y"}
    assert pump.drain(5) == (True, 0)


def test_failing_handler_is_retried_and_nothing_is_skipped(aws, stack):
    tpl = stack(batch=4)
    calls = []

    def flaky(event, context):
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in event["Records"]]
        calls.append(ns)
        if len(calls) in (2, 3):  # the second batch fails twice
            raise RuntimeError("transient")

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": flaky},
                      max_backoff=0.05)
    put(aws, 0, 10)
    drained, n = pump.drain(10)
    assert drained and n == 10
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7], [4, 5, 6, 7], [8, 9]]


def test_permanent_failure_blocks_the_shard_and_drain_times_out(aws, stack):
    tpl = stack(batch=5)
    calls = []

    def broken(event, context):
        calls.append(len(event["Records"]))
        raise RuntimeError("always")

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": broken},
                      max_backoff=0.05)
    put(aws, 0, 3)
    assert pump.drain(0.5) == (False, 0)
    assert len(calls) >= 2 and set(calls) == {3}
    [shard] = pump.mappings[0].shards.values()
    assert shard.checkpoint is None and len(shard.buffer) == 3


def test_maximum_retry_attempts_drops_the_batch(aws, stack):
    tpl = stack(batch=5, retries=1)
    calls = []

    def broken_once_per_batch(event, context):
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in event["Records"]]
        calls.append(ns)
        if ns[0] == 0:
            raise RuntimeError("poison")

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"],
                      handlers={"SinkFunction": broken_once_per_batch}, max_backoff=0.01)
    put(aws, 0, 7)
    drained, n = pump.drain(5)
    assert drained and n == 2
    assert calls == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [5, 6]]


def test_report_batch_item_failures(aws, stack):
    tpl = stack(batch=5, report=True)
    calls = []

    def partial(event, context):
        recs = event["Records"]
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in recs]
        calls.append(ns)
        if len(calls) == 1:  # records 2.. fail the first time
            return {"batchItemFailures": [{"itemIdentifier": recs[3]["dynamodb"]["SequenceNumber"]},
                                          {"itemIdentifier": recs[2]["dynamodb"]["SequenceNumber"]}]}
        return {"batchItemFailures": []}

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": partial},
                      max_backoff=0.01)
    put(aws, 0, 8)
    drained, n = pump.drain(5)
    assert drained and n == 8
    assert calls[0] == [0, 1, 2, 3, 4]
    assert calls[1] == [2, 3, 4, 5, 6]
    assert calls[2] == [7]


def test_latest_starting_position_and_background_thread(aws, stack, tmp_path):
    tpl = stack(position="LATEST", batch=100, window=0.3)
    put(aws, 0, 3)  # before the mapping exists: not delivered with LATEST
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], busy_interval=0.02, idle_interval=0.05)
    pump.pump_once()  # positions the iterator (LATEST) now
    put(aws, 3, 4)
    t0 = time.monotonic()
    pump.start()
    try:
        while not delivered(tmp_path) and time.monotonic() - t0 < 60:  # however loaded the machine
            time.sleep(0.02)
        waited = time.monotonic() - t0
    finally:
        pump.stop()
    batches = delivered(tmp_path)
    assert numbers(batches) == [3, 4, 5, 6]
    assert len(batches) == 1  # the batching window gathered them
    assert waited >= 0.25


def test_template_without_stream_events_drains_at_once(aws, template):
    pump = StreamPump(template, dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"])
    assert pump.drain(1) == (True, 0)
    assert pump.start() is pump
    pump.stop()


def failure_records(aws, name="pump-fail"):
    return sqs_messages(aws["sqs"], name)


def seq_of(aws, n):
    """The stream sequence number of item n (read back through a fresh pump-less stream scan)."""
    ddbs = aws["dynamodbstreams"]
    arn = aws["dynamodb"].describe_table(TableName="pump-events")["Table"]["LatestStreamArn"]
    shard = ddbs.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = ddbs.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    for r in ddbs.get_records(ShardIterator=it, Limit=1000)["Records"]:
        if r["dynamodb"]["Keys"]["n"]["N"] == str(n):
            return r["dynamodb"]["SequenceNumber"]
    raise AssertionError(n)


def test_poison_record_is_bisected_out_retried_then_sent_to_the_on_failure_queue(aws, stack):
    """BisectBatchOnFunctionError halves a failing batch (not counted as a retry) until the poison
    record is alone; it is then retried MaximumRetryAttempts times, discarded, and its metadata
    lands in the template's on-failure queue. Everything else is delivered, in order."""
    tpl = stack(batch=8, retries=2, bisect=True, dlq=True)
    calls = []

    def poison_five(event, context):
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in event["Records"]]
        calls.append(ns)
        if 5 in ns:
            raise RuntimeError("cannot decode record 5")

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": poison_five},
                      max_backoff=0.01, sqs_client=aws["sqs"])
    put(aws, 0, 10)
    assert pump.drain(10) == (True, 9)
    assert calls == [[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5], [4],
                     [5], [5], [5],  # first attempt + 2 retries
                     [6], [7], [8, 9]]  # past the bisected batch: full batches again
    [info] = failure_records(aws)
    b = info["DDBStreamBatchInfo"]
    assert info["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert info["requestContext"]["approximateInvokeCount"] == 3
    assert info["requestContext"]["functionArn"].endswith(":function:pump-SinkFunction")
    assert b["batchSize"] == 1 and b["startSequenceNumber"] == b["endSequenceNumber"] == seq_of(aws, 5)
    assert b["streamArn"] == aws["dynamodb"].describe_table(TableName="pump-events")["Table"]["LatestStreamArn"]
    assert b["shardId"] and b["approximateArrivalOfFirstRecord"].endswith("Z")
    assert pump.mappings[0].discarded == [info]


def test_without_bisection_the_whole_failing_batch_is_discarded(aws, stack):
    tpl = stack(batch=4, retries=1, dlq=True)
    calls = []

    def poison_one(event, context):
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in event["Records"]]
        calls.append(ns)
        if 1 in ns:
            raise RuntimeError("poison")

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": poison_one},
                      max_backoff=0.01, sqs_client=aws["sqs"])
    put(aws, 0, 6)
    assert pump.drain(10) == (True, 2)
    assert calls == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5]]
    [info] = failure_records(aws)
    assert info["DDBStreamBatchInfo"]["batchSize"] == 4
    assert info["DDBStreamBatchInfo"]["startSequenceNumber"] == seq_of(aws, 0)
    assert info["DDBStreamBatchInfo"]["endSequenceNumber"] == seq_of(aws, 3)


def test_partial_failure_retries_count_from_the_reported_record(aws, stack):
    """A partial batch response checkpoints before the lowest reported record; a record reported
    again at the head of its batch counts a retry (no bisection: the invocation did not fail)."""
    tpl = stack(batch=4, report=True, retries=1, bisect=True, dlq=True)
    calls = []

    def report_two(event, context):
        recs = event["Records"]
        ns = [int(r["dynamodb"]["Keys"]["n"]["N"]) for r in recs]
        calls.append(ns)
        if 2 in ns:
            return {"batchItemFailures": [{"itemIdentifier": recs[ns.index(2)]["dynamodb"]["SequenceNumber"]}]}
        return None

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": report_two},
                      max_backoff=0.01, sqs_client=aws["sqs"])
    put(aws, 0, 7)
    assert pump.drain(10) == (True, 2 + 1)
    # [0,1] done and 2 failed (first attempt); [2..5] fails at its head (retry 1 of 1): discarded
    assert calls == [[0, 1, 2, 3], [2, 3, 4, 5], [6]]
    [info] = failure_records(aws)
    assert info["DDBStreamBatchInfo"]["startSequenceNumber"] == seq_of(aws, 2)
    assert info["DDBStreamBatchInfo"]["batchSize"] == 4


@pytest.mark.parametrize("answer", [{"batchItemFailures": [{"itemIdentifier": ""}]},
                                    {"batchItemFailures": [{"itemIdentifier": None}]},
                                    {"batchItemFailures": [{"id": "1"}]},
                                    {"batchItemFailures": [{"itemIdentifier": "999"}]}])
def test_malformed_batch_item_failures_fail_the_whole_batch(aws, stack, answer):
    tpl = stack(batch=3, report=True, retries=0, dlq=True)
    calls = []

    def bad(event, context):
        calls.append(len(event["Records"]))
        return answer

    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handlers={"SinkFunction": bad},
                      max_backoff=0.01, sqs_client=aws["sqs"])
    put(aws, 0, 3)
    assert pump.drain(5) == (True, 0)
    assert calls == [3]
    assert [i["DDBStreamBatchInfo"]["batchSize"] for i in failure_records(aws)] == [3]


def test_records_older_than_the_maximum_age_are_discarded_unsent(aws, stack):
    tpl = stack(batch=10, max_age=60, dlq=True)
    calls = []
    skew = {"s": 0.0}
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"],
                      handlers={"SinkFunction": lambda e, c: calls.append(len(e["Records"]))},
                      sqs_client=aws["sqs"], clock=lambda: time.time() + skew["s"])
    put(aws, 0, 3)
    skew["s"] = 120  # two minutes later
    assert pump.drain(5) == (True, 0)
    assert calls == []
    [info] = failure_records(aws)
    assert info["requestContext"]["condition"] == "RecordAgeExceeded"
    assert info["DDBStreamBatchInfo"]["batchSize"] == 3
    skew["s"] = 0
    put(aws, 3, 2)
    assert pump.drain(5) == (True, 2) and calls == [2]


def test_local_reset_wipes_the_tables_and_no_function_sees_the_removals(aws, stack, tmp_path):
    """infra.local.reset (moto's /moto-api/reset in --sqs-any-signature mode): every item goes, the
    records not yet delivered and the REMOVE records of the wipe are skipped, a record written
    after the reset is delivered at once."""
    from infra.local.handlers import HandlerCache
    from infra.local.reset import LocalReset

    tpl = stack(batch=10)
    cache = HandlerCache()
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"],
                      streams_client_=aws["dynamodbstreams"], handler_cache=cache)
    put(aws, 0, 5)
    assert pump.drain(10) == (True, 5)
    put(aws, 5, 3)  # not delivered before the reset
    reset = LocalReset(T.make_context(tpl, "pump"), dynamodb_client=aws["dynamodb"], s3_client=aws["s3"],
                       handlers=cache, pumps=[pump])
    assert reset() == {"items": 8, "objects": 0, "stream_records_skipped": 3 + 8}
    assert aws["dynamodb"].scan(TableName="pump-events")["Items"] == []
    assert pump.drain(5) == (True, 0)
    assert numbers(delivered(tmp_path)) == list(range(5))
    put(aws, 100, 1)
    assert pump.drain(10) == (True, 1)
    assert numbers(delivered(tmp_path)) == [*range(5), 100]


class WriteCount:
    """A ``write_signal`` as moto_serial's: a count the test bumps after each write."""

    def __init__(self):
        import threading

        self.n, self.calls = 0, 0
        self.changed = threading.Condition()

    def bump(self):
        with self.changed:
            self.n += 1
            self.changed.notify_all()

    def __call__(self, after, wait):
        self.calls += 1
        with self.changed:
            if after is not None:
                self.changed.wait_for(lambda: self.n != after, timeout=wait)
            return self.n


class CountingStreams:
    def __init__(self, client):
        self.client, self.get_records_calls, self.iterator_calls = client, 0, 0

    def get_records(self, **kw):
        self.get_records_calls += 1
        return self.client.get_records(**kw)

    def get_shard_iterator(self, **kw):
        self.iterator_calls += 1
        return self.client.get_shard_iterator(**kw)

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_an_idle_pump_with_a_write_signal_sleeps_until_a_write(aws, stack, tmp_path, monkeypatch):
    """With a write signal an idle pump reads no shard until the store counts a write, then
    delivers what was written (without one it polls: several get_records a second)."""
    from infra.local import streams

    monkeypatch.setattr(streams, "IDLE_WAIT_S", 0.1)  # many empty waits…
    monkeypatch.setattr(streams, "IDLE_PASS_S", 60.0)  # …and no pass for them within this test
    tpl = stack(batch=100)
    writes, counting = WriteCount(), CountingStreams(aws["dynamodbstreams"])
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"], streams_client_=counting,
                      busy_interval=0.02, idle_interval=0.05, write_signal=writes)
    put(aws, 0, 2)
    writes.bump()
    pump.start()
    try:
        deadline = time.monotonic() + 60  # however loaded the machine
        while numbers(delivered(tmp_path)) != [0, 1] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert numbers(delivered(tmp_path)) == [0, 1]
        while not writes.changed._waiters and time.monotonic() < deadline:  # noqa: SLF001 - idle
            time.sleep(0.02)
        before = counting.get_records_calls
        time.sleep(1.0)  # 20 idle intervals: a polling pump reads the shard several times
        assert counting.get_records_calls == before
        put(aws, 2, 3)
        writes.bump()
        while numbers(delivered(tmp_path)) != [0, 1, 2, 3, 4] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert numbers(delivered(tmp_path)) == [0, 1, 2, 3, 4]
    finally:
        pump.stop()


def test_moto_serial_counts_dynamodb_writes_and_answers_the_long_poll():
    """moto_serial's write count: DynamoDB operations but the reads, not DynamoDB Streams or other
    services; ``GET /_lakeq/dynamodb-writes?after=N&wait=S`` answers once the count differs."""
    import threading

    from infra.local.moto_serial import WRITES_PATH, Serialised

    def app(environ, start_response):
        start_response("200 OK", [])
        return [b"{}"]

    s = Serialised(app)

    def request(target=None, path="/", query=""):
        env = {"PATH_INFO": path, "QUERY_STRING": query}
        if target:
            env["HTTP_X_AMZ_TARGET"] = target
        status = []
        body = b"".join(s(env, lambda st, headers: status.append(st)))
        return status[0], body

    def count(query="wait=0"):
        status, body = request(path=WRITES_PATH, query=query)
        assert status == "200 OK"
        return json.loads(body)["writes"]

    for target in ("DynamoDB_20120810.GetItem", "DynamoDB_20120810.Query", "DynamoDB_20120810.Scan",
                   "DynamoDB_20120810.DescribeTable", "DynamoDBStreams_20120810.GetRecords",
                   "DynamoDBStreams_20120810.GetShardIterator", None):
        request(target)
    assert count() == 0
    for target in ("DynamoDB_20120810.PutItem", "DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.DeleteItem",
                   "DynamoDB_20120810.BatchWriteItem", "DynamoDB_20120810.TransactWriteItems",
                   "DynamoDB_20120810.CreateTable", "DynamoDB_20120810.ExecuteStatement"):
        request(target)
    assert count() == 7
    assert count("after=3&wait=30") == 7  # differs: at once
    assert request(path=WRITES_PATH, query="after=x")[0].startswith("400")
    got = []
    waiter = threading.Thread(target=lambda: got.append(count("after=7&wait=30")))
    waiter.start()
    while not s.changed._waiters:  # noqa: SLF001 - the long poll is waiting
        time.sleep(0.01)
    assert got == []
    request("DynamoDB_20120810.PutItem")
    waiter.join(30)
    assert got == [8]


def test_a_pass_reads_only_the_streams_of_tables_written_since_it_read_them_to_the_end(aws, stack, tmp_path):
    """``pump_once(tables=...)`` (moto_serial's write counts per table, taken before the pass): a
    mapping whose table's count (and the count of writes naming no table, ``*``) is what it was when a
    pass read its shards to their end reads nothing; any write to it, or a ``*`` write, reads again —
    with the same iterator, kept at the shard's end (moto_speed keeps the shard through a cancelled
    transaction), so nothing written after it is missed."""
    from infra.local import streams

    assert streams.SHARDS_KEPT
    tpl = stack(batch=10)
    counting = CountingStreams(aws["dynamodbstreams"])
    pump = StreamPump(tpl, stack_name="pump", dynamodb_client=aws["dynamodb"], streams_client_=counting)
    put(aws, 0, 3)
    assert pump.pump_once(flush=True, tables={"pump-events": 3}) == (3, 3, 0)
    assert pump.pump_once(flush=True, tables={"pump-events": 3}) == (0, 0, 0)  # read to the end
    calls, iterators = counting.get_records_calls, counting.iterator_calls
    assert pump.pump_once(flush=True, tables={"pump-events": 3, "other": 7}) == (0, 0, 0)
    assert counting.get_records_calls == calls  # not read: nothing new can be there
    put(aws, 3, 2)
    try:  # a cancelled transaction on the table: moto puts its copy back
        aws["dynamodb"].transact_write_items(TransactItems=[{"Put": {
            "TableName": "pump-events", "Item": {"k": {"S": "a"}, "n": {"N": "0"}},
            "ConditionExpression": "attribute_not_exists(k)"}}])
    except aws["dynamodb"].exceptions.TransactionCanceledException:
        pass
    put(aws, 5, 1)
    assert pump.pump_once(flush=True, tables={"pump-events": 7}) == (3, 3, 0)
    assert (counting.get_records_calls, counting.iterator_calls) == (calls + 1, iterators)  # the kept iterator
    assert pump.pump_once(flush=True, tables={"pump-events": 7}) == (0, 0, 0)
    calls = counting.get_records_calls
    assert pump.pump_once(flush=True, tables={"pump-events": 7, "*": 1}) == (0, 0, 0)
    assert counting.get_records_calls == calls + 1  # a write naming no table we could read: read
    assert pump.pump_once(flush=True, tables=None) == (0, 0, 0)
    assert counting.get_records_calls == calls + 2  # no counts: every shard read
    assert numbers(delivered(tmp_path)) == list(range(6))


def test_moto_serial_counts_writes_per_table_named():
    """moto_serial's ``tables``: each write request's tables (``TableName``, BatchWriteItem's keys,
    TransactWriteItems' actions, a table's ARN by its name); ``*`` when it names none it can read."""
    from infra.local.moto_serial import Serialised, tables_written

    assert tables_written(b'{"TableName": "a", "Item": {}}') == {"a"}
    assert tables_written(b'{"RequestItems": {"a": [], "b": []}}') == {"a", "b"}
    assert tables_written(json.dumps({"TransactItems": [
        {"Put": {"TableName": "a"}}, {"Update": {"TableName": "arn:aws:dynamodb:us-east-1:1:table/c"}},
        {"ConditionCheck": {"TableName": "d"}}]}).encode()) == {"a", "c", "d"}
    assert tables_written(b'{"Statement": "UPDATE x SET y = 1"}') == {"*"}
    assert tables_written(b"not json") == tables_written(b"[]") == {"*"}

    def app(environ, start_response):
        assert environ["wsgi.input"].read() == body  # the application still reads the whole body
        start_response("200 OK", [])
        return [b"{}"]

    s = Serialised(app)
    body = b'{"TableName": "a"}'
    for target in ("DynamoDB_20120810.PutItem", "DynamoDB_20120810.GetItem", "DynamoDB_20120810.UpdateItem"):
        env = {"PATH_INFO": "/", "HTTP_X_AMZ_TARGET": target, "wsgi.input": io.BytesIO(body),
               "CONTENT_LENGTH": str(len(body))}
        b"".join(s(env, lambda *a: None))
    assert (s.writes, s.tables) == (2, {"a": 2})


def test_the_shard_journal_is_installed_whenever_the_pump_keeps_iterators(monkeypatch):
    """``streams.SHARDS_KEPT`` (LAKEQ_MOTO_PLAIN unset) keeps an iterator at a shard's end, which sees
    new records only while moto_speed's journal keeps the shard through a cancelled transaction.
    ``install()`` left the journal out too whenever moto's traversers were not the ones its walk
    stands for (a moto upgrade): the pump then read a discarded shard copy for good after the first
    cancelled transaction, and no record of that table was delivered again."""
    from moto.dynamodb import models as ddb_models

    from infra.local import moto_speed, streams

    assert streams.SHARDS_KEPT
    moto_speed.uninstall()
    try:
        monkeypatch.setattr(moto_speed, "_maps_are_static", lambda: False)
        moto_speed.install()
        assert ddb_models.DynamoDBBackend.transact_write_items is moto_speed._transact_write_items
        assert ddb_models.copy is moto_speed._COPY
    finally:
        monkeypatch.undo()
        moto_speed.uninstall()
        moto_speed.install()
    assert moto_speed.installed()
