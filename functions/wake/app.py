"""Wake function: the WebSocket API's routes (``$connect``, ``watch``, ``$disconnect``, ``ping``;
lakeq.wake). API Gateway WebSocket events: ``requestContext.routeKey`` names the route,
``requestContext.connectionId`` the connection. A ``$connect`` answered with a non-2xx status is
refused (the client's handshake fails with that status); a message route's answer body is sent
back on the connection (the routes' ``$default`` route response in template.yaml).
"""
from aws_lambda_powertools.metrics import MetricUnit

from lakeq.common.obs import logger, metrics, tracer
from lakeq.wake import service as wake
from lakeq.wake.plan import reply


def _answer(status: int, body: str, headers: dict | None = None) -> dict:
    out = {"statusCode": status, "body": body}
    if headers:
        out["headers"] = headers
    return out


@logger.inject_lambda_context
@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event, context):
    rc = event.get("requestContext") or {}
    route, conn = rc.get("routeKey"), rc.get("connectionId") or ""
    try:
        if route == "$connect":
            p, subprotocol = wake.connect(conn, event.get("headers"))
            metrics.add_metric(name="WakeConnects", unit=MetricUnit.Count, value=1)
            return _answer(200, "", {"Sec-WebSocket-Protocol": subprotocol} if subprotocol else None)
        if route == "$disconnect":
            wake.disconnect(conn)
            return _answer(200, "")
        if route == "watch":
            return _answer(200, reply("watching", **wake.watch(conn, event.get("body"))))
        if route == "ping":  # the keep-alive (API Gateway closes a connection idle for 10 minutes)
            return _answer(200, reply("pong"))
        return _answer(400, wake.error_reply(wake.BadRequest(
            "unknown action: send {\"action\": \"watch\", ...} or {\"action\": \"ping\"}"))[1])
    except Exception as e:  # noqa: BLE001 - mapped like any route's error
        if not isinstance(e, wake.ApiError):
            logger.exception("wake route failed")
        status, body = wake.error_reply(e)
        return _answer(status, body)
