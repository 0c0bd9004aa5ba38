"""The local stack: moto server + template-driven tables, a werkzeug gateway and a streams pump."""
import os


def moto_plain() -> bool:
    """``LAKEQ_MOTO_PLAIN=1`` (or ``true``): moto left as it is — no UpdateExpression walk or
    transaction journal (infra/local/moto_speed.py), no trimmed server (moto_serial.trim_server),
    and the stream pumps take a fresh iterator after each empty read (streams.SHARDS_KEPT). The one
    place the switch is read."""
    return os.environ.get("LAKEQ_MOTO_PLAIN", "") in ("1", "true")
