"""One seam under every AWS call a handler makes, for the local stack and the tests.

boto3 clients and pynamodb's connection both end in ``botocore.client.BaseClient._make_api_call``
(pynamodb 6: ``Connection._make_api_call`` → ``self.client._make_api_call``), so wrapping that one
method sees every DynamoDB, DynamoDB Streams and S3 call, whatever library made it, in-process
(moto's ``mock_aws``, which stubs below this point, at ``before-send``) and against moto's server
alike. What runs there is a list of *hooks*:

- ``hook.before(call)`` may raise (a denied call: nothing reaches the store);
- ``hook.after(call, response)`` returns the response (possibly changed, e.g. a Query page cut at
  1 MB) or raises (a crash *after* the store applied the call).

``call`` is a :class:`Call`: service (``"dynamodb"``, ``"dynamodbstreams"``, ``"s3"``), operation
name, the API parameters, and the logical id of the function the caller is acting as
(:func:`acting_as`; ``None`` for test set-up and the stack's own plumbing).

Hooks run in the order added for ``before`` and in reverse for ``after``. The wrapper is installed
once per process (:func:`install`), is a no-op pass-through with no hooks, and is never used by the
deployed functions (nothing under ``layers/`` or ``functions/`` imports it).
"""
from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

from botocore.client import BaseClient

_function: contextvars.ContextVar[str | None] = contextvars.ContextVar("lakeq_acting_as", default=None)
_hooks: list["Hook"] = []
_lock = threading.Lock()
_original = None
# An optional transport tried before the wire (tests: :func:`infra.local.moto_direct.call`); it
# returns its ``NOT_HANDLED`` marker for a call it leaves to botocore.
direct: Any = None


@dataclass
class Call:
    service: str
    operation: str
    params: dict
    function: str | None
    endpoint: str | None = None  # the client's endpoint URL (the management API's names its stage)


class Hook(Protocol):  # pragma: no cover - a protocol
    def before(self, call: Call) -> None: ...

    def after(self, call: Call, response: dict) -> dict: ...


def current_function() -> str | None:
    """The logical id of the function the current thread's calls are made for, or None."""
    return _function.get()


@contextmanager
def acting_as(logical_id: str | None) -> Iterator[None]:
    """Calls made inside (in this thread / context) are the function ``logical_id``'s."""
    token = _function.set(logical_id)
    try:
        yield
    finally:
        _function.reset(token)


def set_function(logical_id: str | None) -> None:
    """For a process that is one function for its whole life (a local-stack worker)."""
    _function.set(logical_id)


def install() -> None:
    """Wrap ``BaseClient._make_api_call`` (idempotent)."""
    global _original
    with _lock:
        if _original is not None:
            return
        _original = BaseClient._make_api_call

        def _send(self: Any, operation_name: str, api_params: dict) -> Any:
            if direct is not None:
                from infra.local import moto_direct

                response = direct(self, operation_name, api_params)
                if response is not moto_direct.NOT_HANDLED:
                    return response
            return _original(self, operation_name, api_params)

        def _make_api_call(self: Any, operation_name: str, api_params: dict) -> Any:
            hooks = list(_hooks)
            if not hooks:
                return _send(self, operation_name, api_params)
            call = Call(self.meta.service_model.service_name, operation_name, api_params, _function.get(),
                        getattr(self.meta, "endpoint_url", None))
            for h in hooks:
                h.before(call)
            response = _send(self, operation_name, api_params)
            for h in reversed(hooks):
                response = h.after(call, response)
            return response

        BaseClient._make_api_call = _make_api_call  # type: ignore[method-assign]


def add(hook: Hook) -> None:
    install()
    with _lock:
        _hooks.append(hook)


def remove(hook: Hook) -> None:
    with _lock:
        if hook in _hooks:
            _hooks.remove(hook)


@contextmanager
def hooked(*hooks: Hook) -> Iterator[None]:
    """``with hooked(h1, h2): ...`` — the hooks are active inside, removed after."""
    for h in hooks:
        add(h)
    try:
        yield
    finally:
        for h in hooks:
            remove(h)


def active() -> list[Hook]:
    return list(_hooks)
