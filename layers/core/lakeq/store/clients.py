"""The container's botocore clients other than DynamoDB's (pynamodb has its own): one per AWS
service, made on first use, so a function that never touches S3 or Glue never builds one (botocore
rather than boto3: boto3 would also load s3transfer; docs/design.md "Cold start"). Used by
:mod:`lakeq.store.bodies` (S3: claim-checked bodies, the replays' objects) and
:mod:`lakeq.store.jobs` (Glue: the replay's selection job) and :mod:`lakeq.store.metrics`
(CloudWatch: the console's charts)."""
from __future__ import annotations

from typing import Any

_clients: dict[str, Any] = {}


def client(service: str) -> Any:
    """The container's botocore client of ``service`` (``"s3"``, ``"glue"``). O(1) after the first call."""
    c = _clients.get(service)
    if c is None:
        import botocore.session

        c = _clients[service] = botocore.session.get_session().create_client(service)
    return c
