"""``python -m infra.local [--port N]`` (``make run``): the whole lakeq stack on this machine.

1. moto's server as a child process on a free loopback port (``AWS_ENDPOINT_URL`` points at it);
2. the tables and the lake bucket of ``template.yaml`` created there;
3. the DynamoDB-streams pump thread (the template's ``DynamoDB`` event sources); every function
   (worker process) acts under its IAM role from the template, with DynamoDB's, Lambda's and API
   Gateway's limits (``infra/local/aws_rules.py``);
4. the scheduler (the template's ``Schedule`` events: each function invoked on its schedule under its
   role; with ``--with-jobs`` / ``LAKEQ_WITH_JOBS=1`` also the Glue triggers, each running its job
   on a local SparkSession; ``LAKEQ_SCHEDULE_SCALE`` compresses time, ``LAKEQ_JOBS_EVERY`` sets
   the jobs' interval in seconds; ``infra/local/schedules.py``); a function's ``StartJobRun`` runs
   the job too (``/_local/glue``, ``infra/local/glue.py``: the replay's selection job);
5. the gateway (the template's ``HttpApi`` routes → the functions' handlers) on
   ``127.0.0.1:$LAKEQ_PORT`` (default 3000);
6. the WebSocket API of the template (wake-ups for waiting consumers, ``infra/local/websocket.py``)
   and its management API on ``--ws-port`` (default ``$LAKEQ_WS_PORT``, else any free port); the
   functions' ``apigatewaymanagementapi`` clients are pointed at it
   (``AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI``).

Ctrl-C or SIGTERM stops everything (moto child included) and exits 0.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from werkzeug.serving import WSGIRequestHandler, make_server

from . import template as tpl_mod
from .keepalive import KeepAlive


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Let the moto child die with us even if we are SIGKILLed (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def start_moto(port: int, log_path: str) -> subprocess.Popen:
    log_file = open(log_path, "ab")
    env = dict(os.environ)
    env.pop("AWS_ENDPOINT_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "infra.local.moto_serial", "-H", "127.0.0.1", "-p", str(port)],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env,
        preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
    )


def wait_for_moto(proc: subprocess.Popen, url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server did not answer on {url} within {timeout}s")


class _QuietHandler(KeepAlive, WSGIRequestHandler):
    """werkzeug's request handler with keep-alive (infra/local/keepalive.py), without its own access
    log (the gateway logs requests)."""

    def log_request(self, code="-", size="-"):  # noqa: D102
        pass


def _print_sqs(base: str, secrets: dict[str, str], any_signature: bool) -> None:
    """The admin's SQS credential (derived from the admin key and the master secret, as
    ``GET /v1/sqs-credentials/admin`` returns it) and how to use it."""
    arn = secrets.get("SqsMasterSecret")
    if not arn:
        return
    import boto3

    from lakeq.admin.auth import hash_key
    from lakeq.sqs import credentials as cred  # the gateway put the layers on sys.path

    master = boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"].encode()
    akid = cred.admin_access_key_id(master, hash_key(tpl_mod.admin_key()))
    secret = cred.derive_secret(master, akid)
    print(f"SQS endpoint: {base}  (AWS JSON 1.0 / query; SigV4, any region)", flush=True)
    print(f"admin SQS credential: access key id {akid}  secret access key {secret}", flush=True)
    print(f"  AWS_ACCESS_KEY_ID={akid} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION=us-east-1 "
          f"aws sqs create-queue --endpoint-url {base} --queue-name demo", flush=True)
    print(f"  python -c \"import boto3; s = boto3.client('sqs', endpoint_url='{base}', region_name='us-east-1', "
          f"aws_access_key_id='{akid}', aws_secret_access_key='{secret}'); "
          f"u = s.create_queue(QueueName='demo')['QueueUrl']; s.send_message(QueueUrl=u, MessageBody='hi'); "
          f"print(s.receive_message(QueueUrl=u)['Messages'][0]['Body'])\"", flush=True)
    print(f"  a client's own: curl -s -X POST {base}/v1/clients/<name>/sqs-credentials "
          f"-H 'Authorization: Bearer {tpl_mod.admin_key()}'", flush=True)
    if any_signature:
        print("SQS: ANY well-formed signature is accepted (--sqs-any-signature; conformance runs only)", flush=True)
    else:
        print("SQS conformance runs: make run SQS_ANY_SIGNATURE=1 (python -m infra.local --sqs-any-signature) "
              "accepts any well-formed signature", flush=True)


class Stopped(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM: the stack stops and exits 0.

    Not ``KeyboardInterrupt``: CPython (3.11) remembers a ``KeyboardInterrupt`` that escapes code
    run by ``exec`` of a string (``dataclasses`` builds its methods so) and then ends the process
    with SIGINT (exit -2) after ``main()`` returned 0, although ``main()`` caught it: the SIGINT
    test failed so when the signal landed while a module defined a dataclass. A ``BaseException``
    so that no ``except Exception`` on the way swallows it."""


def _raise_stopped(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise :class:`Stopped` in the main thread from here on. SIGINT too stops
    the stack when it was started with SIGINT ignored (a non-interactive shell's background job
    inherits SIG_IGN, and Python then installs no handler: the SIGINT test hung so in a CI run
    launched with `&`)."""
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("LAKEQ_PORT") or 3000),
                        help="gateway port on 127.0.0.1 (default $LAKEQ_PORT or 3000; 0 = any free)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--template", default=str(tpl_mod.TEMPLATE_PATH))
    parser.add_argument("--stack-name", default=tpl_mod.LOCAL_STACK)
    parser.add_argument("--moto-port", type=int, default=0, help="default: any free port")
    parser.add_argument("--in-process", action="store_true",
                        help="run handlers in this process (module copies per instance) instead of "
                             "one worker process per warm instance; for debugging")
    parser.add_argument("--with-jobs", action="store_true",
                        default=os.environ.get("LAKEQ_WITH_JOBS", "").lower() in ("1", "true", "yes"),
                        help="run the Glue jobs on their triggers' schedules (default $LAKEQ_WITH_JOBS); "
                             "needs Java 17 and the `lake` extra")
    parser.add_argument("--jobs-every", type=float, default=None,
                        help="run the Glue jobs every N seconds instead of their triggers' schedules "
                             "(default $LAKEQ_JOBS_EVERY)")
    parser.add_argument("--no-schedules", action="store_true",
                        help="do not fire the template's schedules by themselves "
                             "(POST /_local/schedules/run still does)")
    parser.add_argument("--sqs-any-signature", action="store_true",
                        help="SQS endpoint: accept any well-formed SigV4 signature (for conformance runs; "
                             "a known access key id acts as its client, an unknown one as the admin). "
                             "Never use it on a shared machine")
    parser.add_argument("--ws-port", type=int, default=int(os.environ.get("LAKEQ_WS_PORT") or 0),
                        help="WebSocket (wake-up) API port on the same host (default $LAKEQ_WS_PORT; "
                             "0 = any free)")
    parser.add_argument("--moto-log", default=None,
                        help="moto server's log file (default: a file in the temp directory)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    log = logging.getLogger("lakeq.local")

    stop_on_signals()

    moto_port = args.moto_port or free_port()
    moto_url = f"http://127.0.0.1:{moto_port}"
    moto_log = args.moto_log or os.path.join(tempfile.gettempdir(), f"lakeq-moto-{moto_port}.log")
    moto = None
    server = None
    pump = None
    scheduler = None
    handlers = None
    wsgw = None
    fast_pump = None
    glue = None
    try:
        moto = start_moto(moto_port, moto_log)
        wait_for_moto(moto, moto_url)

        admin_key = tpl_mod.admin_key()
        os.environ.update({
            "AWS_ENDPOINT_URL": moto_url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
            "LAKEQ_ADMIN_KEY": admin_key,
        })
        os.environ.pop("AWS_PROFILE", None)
        os.environ.pop("AWS_SESSION_TOKEN", None)
        # the SQS conformance flag: only with --sqs-any-signature (workers inherit os.environ)
        if args.sqs_any_signature:
            os.environ["LAKEQ_SQS_ANY_SIGNATURE"] = "1"
        else:
            os.environ.pop("LAKEQ_SQS_ANY_SIGNATURE", None)
        os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        # push delivery (issue 17) may POST over plain http to loopback receivers on the local stack only
        os.environ["LAKEQ_PUSH_ALLOW_HTTP_LOOPBACK"] = "1"

        import boto3

        from .gateway import Gateway, access_log_to_stderr
        from .handlers import HandlerCache
        from .schedules import Scheduler, glue_runner
        from .streams import Pumps, StreamPump, moto_write_signal
        from .worker import ProcessPool

        template = tpl_mod.load_template(args.template)
        ctx = tpl_mod.make_context(template, args.stack_name)
        os.environ.update(tpl_mod.environment(ctx))
        ddb = boto3.client("dynamodb")
        tables = tpl_mod.create_tables(ddb, ctx)
        buckets = tpl_mod.create_buckets(boto3.client("s3"), ctx)
        tpl_mod.create_queues(boto3.client("sqs"), ctx)  # the stream mappings' on-failure queue
        secrets = tpl_mod.create_secrets(boto3.client("secretsmanager"), ctx)  # the SQS master secret
        log.info("moto on %s: tables %s, buckets %s", moto_url, ", ".join(tables.values()),
                 ", ".join(buckets.values()))

        # what AWS enforces (IAM roles from the template, DynamoDB's limits): checked in this
        # process (in-process handlers, the pump) and in every worker (infra/local/aws_rules.py)
        from . import aws_rules, interceptor

        rules = aws_rules.AwsRules.from_template(ctx=ctx)
        interceptor.add(rules)
        # the functions' EMF lines also go into moto's CloudWatch, as CloudWatch Logs would put them
        # (infra/local/emf.py): GetMetricData (the console's charts) reads them as on AWS
        from .emf import COLLECTED, CloudWatchSink

        COLLECTED.sink = CloudWatchSink(boto3.client("cloudwatch"))
        # Lambda execution environments: worker processes (or, with --in-process, module copies)
        handlers = (HandlerCache() if args.in_process
                    else ProcessPool(tpl_mod.layer_dirs(template), rules=rules))
        # the WebSocket API (wake-ups) on its own port; functions post to its management API
        from .websocket import WebSocketGateway

        wsgw = WebSocketGateway(template, stack_name=args.stack_name, handler_cache=handlers,
                                host=args.host, port=args.ws_port)
        os.environ["AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI"] = wsgw.management_url
        os.environ["LAKEQ_LOCAL_WAKE_URL"] = wsgw.url  # GET /v1/health's wake_url (the template's is AWS's)
        wsgw.start()
        # two pumps (threads): the mappings without a batching window (the wake-up notifier,
        # latency-bound) never wait behind a slow batch of another function (the archiver's);
        # ``pump`` serves the others (POST /_local/streams/drain drains both). While idle they wait
        # for moto's next DynamoDB write (moto_serial's write count) instead of polling the shards
        pump = StreamPump(template, stack_name=args.stack_name, dynamodb_client=ddb,
                          handler_cache=handlers, select=lambda ev: ev.batching_window_s > 0,
                          write_signal=moto_write_signal(moto_url)).start()
        # (Lambda polls a DynamoDB stream's shards four times a second: 0.25 s when idle)
        fast_pump = StreamPump(template, stack_name=args.stack_name, dynamodb_client=ddb,
                               handler_cache=handlers, select=lambda ev: ev.batching_window_s == 0,
                               idle_interval=0.25, write_signal=moto_write_signal(moto_url)).start()
        server = make_server(args.host, args.port, None, threaded=True,
                             request_handler=_QuietHandler)
        port = server.server_port
        # Glue's job-run API on the gateway: a function's StartJobRun (the replay function's) runs the
        # job here; the workers (started from here on) inherit the endpoint (infra/local/glue.py)
        from . import glue as glue_mod

        jobs_runner = glue_runner(port)  # one runner (one job at a time) for the triggers and StartJobRun
        glue = glue_mod.LocalGlue(template, glue_mod.runner(glue_mod.ReplayRun(drain=lambda: pump.drain(120)),
                                                            jobs_runner), stack_name=args.stack_name)
        os.environ[glue_mod.ENV] = f"http://{args.host}:{port}{glue_mod.PATH}"
        # the template's schedules (and, with --with-jobs, the Glue triggers: the jobs talk to
        # this stack over HTTP, so the runner needs the gateway's port)
        scheduler = Scheduler(template, stack_name=args.stack_name, handler_cache=handlers,
                              job_runner=jobs_runner if args.with_jobs else None,
                              jobs_every_s=args.jobs_every)
        reset = None
        if args.sqs_any_signature:  # moto's POST /moto-api/reset (conformance runs only)
            from .reset import LocalReset

            reset = LocalReset(ctx, dynamodb_client=ddb, s3_client=boto3.client("s3"), handlers=handlers,
                               pumps=(pump, fast_pump))
        gateway = Gateway(template, stack_name=args.stack_name, pump=Pumps(pump, fast_pump), handler_cache=handlers,
                          scheduler=scheduler, glue=glue, reset=reset)
        gateway.preload()
        server.app = gateway
        access_log_to_stderr()
        if not args.no_schedules:
            scheduler.start()
        base = f"http://{args.host}:{port}"
        print(f"lakeq local stack: {base}", flush=True)
        print(f"admin key: {admin_key}  (LAKEQ_ADMIN_KEY)", flush=True)
        print(f"WebSocket wake-ups: {wsgw.url}  (docs/api.md \"WebSocket wake-ups\"; "
              f"management API {wsgw.management_url}/@connections/<id>)", flush=True)
        print("try:", flush=True)
        print(f"  curl -s {base}/v1/health", flush=True)
        print(
            f"  curl -s -X POST {base}/v1/topics -H 'Authorization: Bearer {admin_key}' "
            f"-H 'Content-Type: application/json' -d '{{\"name\": \"quotes\", \"queues\": 4}}'",
            flush=True,
        )
        _print_sqs(base, secrets, args.sqs_any_signature)
        for s in scheduler.describe():
            print(f"schedule: {s['name']} {s['expression']} -> {', '.join(s['targets'])}"
                  f"{'' if s['active'] else '  (not run: --with-jobs / LAKEQ_WITH_JOBS=1)'}"
                  f"{'  (on demand only: POST /_local/schedules/run)' if args.no_schedules else ''}", flush=True)
        print("Ctrl-C to stop.", flush=True)
        server.serve_forever(poll_interval=0.2)
    except (Stopped, KeyboardInterrupt):
        pass
    except Exception:  # noqa: BLE001
        log.exception("local stack failed")
        if os.path.exists(moto_log):
            with open(moto_log, "rb") as fh:
                tail = fh.read()[-2000:].decode("utf-8", "replace")
            log.error("moto log tail (%s):\n%s", moto_log, tail)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for p in (pump, fast_pump):  # both at once: each idle one waits up to a second for a write
            if p is not None:
                p.stop_soon()
        if scheduler is not None:
            scheduler.stop(timeout=5)
        if glue is not None:
            glue.stop(timeout=5)
        if server is not None:
            server.server_close()
        if wsgw is not None:
            wsgw.stop()
        if pump is not None:
            pump.stop(timeout=5)
        if fast_pump is not None:
            fast_pump.stop(timeout=5)
        if handlers is not None and hasattr(handlers, "close"):
            handlers.close()
        if moto is not None and moto.poll() is None:
            moto.terminate()
            try:
                moto.wait(10)
            except subprocess.TimeoutExpired:
                moto.kill()
                moto.wait()
    print("lakeq local stack stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
