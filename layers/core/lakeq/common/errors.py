"""The errors' one root and the API's one HTTP mapping.

Every exception class lakeq defines derives from :class:`LakeqError`. Two kinds:

- :class:`ApiError` and its subclasses (here, :mod:`lakeq.rebalance.state`, :mod:`lakeq.store.groups`): the
  client-facing errors, each with a status, a code and a message for API.md's body
  ``{"error": {"code", "message"}}``;
- any other :class:`LakeqError` is internal (``TransactionFailed``, ``settlement.Stale``,
  ``append.Contended``, the fan-out's ``AppendFailed``…): the code that raises it is expected to
  handle it; one that escapes is answered like any unexpected exception, 500 ``internal_error``
  (logged). The SQS endpoint's errors (``SqsError``, ``SqsAuthError``, ``SigV4Error``) are
  rendered in SQS's wire format by :func:`lakeq.sqs.handler.handle`.

:func:`http_error` is the mapping; :func:`lakeq.api.http.make_app` answers every error with it.
:func:`counted` is what a scheduled job does with one item's unexpected error.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class LakeqError(Exception):
    """The root of every error lakeq raises (see the module's docstring)."""


def http_error(e: BaseException) -> tuple[int, str, str]:
    """``(status, code, message)`` of the API's answer to ``e``: an :class:`ApiError`'s own;
    500 ``internal_error`` for anything else (its text is not shown to the client).

    >>> http_error(NotFound("no topic 'x'"))
    (404, 'not_found', "no topic 'x'")
    >>> http_error(LakeqError("a store detail"))
    (500, 'internal_error', 'internal error')
    """
    if isinstance(e, ApiError):
        return e.status, e.code, e.message
    return 500, "internal_error", "internal error"


class ApiError(LakeqError):
    """A client-facing error: ``status``, ``code`` and ``message`` of the API's error body."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


def below_limit(count: int | None, limit: int, missing: str, over: str, code: str) -> None:
    """The answer to a creation past a per-client cap, read before its conditional write (the
    write's condition on the client item's counter is what enforces the cap; this read gives the
    refusal its reason): 404 ``missing`` when the counted item is gone (``count`` None), 409
    ``code`` with ``over`` when ``count`` has reached ``limit``.

    >>> below_limit(2, 3, "gone", "full", "too_many_things")
    >>> below_limit(3, 3, "gone", "full", "too_many_things")
    Traceback (most recent call last):
    lakeq.common.errors.Conflict: full
    >>> below_limit(None, 3, "gone", "full", "too_many_things")
    Traceback (most recent call last):
    lakeq.common.errors.NotFound: gone
    """
    if count is None:
        raise NotFound(missing)
    if count >= limit:
        raise Conflict(over, code=code)


class StaleReceipt(Conflict):
    """A receipt whose lock is no longer its own (locked again, acknowledged or reset since)."""

    code = "stale_receipt"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class Unavailable(ApiError):
    """The store kept refusing a conditional write under contention; the client may retry."""

    status, code = 503, "busy"


@contextmanager
def counted(out: dict, log: logging.Logger, what: str, *args: object) -> Iterator[None]:
    """One item of a scheduled job's walk (the replay copier, the redrive runner, the promoter, the
    groups sweep): an ``Exception`` raised inside is logged (``what % args``, with its traceback)
    and counted in ``out["errors"]`` instead of ending the walk, so the items after it still run;
    the rest of the block is skipped. A ``BaseException`` (a Lambda timeout, a crash the tests
    inject) still ends it.

    >>> out = {}
    >>> with counted(out, logging.getLogger("doctest"), "item %s failed", 1):
    ...     raise KeyError(1)
    >>> out
    {'errors': 1}
    """
    try:
        yield
    except Exception:
        log.exception(what, *args)
        out["errors"] = out.get("errors", 0) + 1
