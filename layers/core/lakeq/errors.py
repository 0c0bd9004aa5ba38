"""API errors: each maps to a status and API.md's body ``{"error": {"code", "message"}}``."""
from __future__ import annotations


class ApiError(Exception):
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


class StaleReceipt(Conflict):
    """A receipt whose lock is no longer its own (locked again, acknowledged or reset since)."""

    code = "stale_receipt"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class Unavailable(ApiError):
    """The store kept refusing a conditional write under contention; the client may retry."""

    status, code = 503, "busy"
