"""Domain errors. Each maps to one problem+json response with a stable ``code``.

Handlers never map errors by message text: the HTTP layer maps by type, Step Functions by ``errorType``
(the class name), so class names here are part of the contract with the state machines.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ArchiveRejectCode(StrEnum):
    """Sub-codes of ``archive_rejected`` (docs/architecture.md, "Error model")."""

    DIGEST_MISMATCH = "digest_mismatch"
    SIZE_MISMATCH = "size_mismatch"
    UNSAFE_PATH = "unsafe_path"
    LINK_NOT_ALLOWED = "link_not_allowed"
    SPECIAL_FILE = "special_file"
    DUPLICATE_ENTRY = "duplicate_entry"
    MISSING_FILE = "missing_file"
    UNEXPECTED_FILE = "unexpected_file"
    TOO_MANY_FILES = "too_many_files"
    TOO_LARGE = "too_large"
    COMPRESSION_RATIO = "compression_ratio"
    CORRUPT_ARCHIVE = "corrupt_archive"
    AMBIGUOUS_HEADER = "ambiguous_header"
    """A tar header feature extractors read differently (docs/decisions.md, "One reading per archive")."""


class PackyardError(Exception):
    """Base of every error a caller may see. ``extra`` lands in the problem body next to code and detail;
    ``headers`` are HTTP headers the answer carries (e.g. ``Retry-After``)."""

    status: int = 500
    code: str = "internal_error"
    title: str = "Internal error"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers: dict[str, str] = dict(headers or {})
        self.extra = extra

    def problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"https://packyard.dev/problems/{self.code}",
            "title": self.title,
            "status": self.status,
            "code": self.code,
            "detail": self.detail,
        }
        body.update(self.extra)
        return body


class InvalidRequest(PackyardError):
    status, code, title = 400, "invalid_request", "Invalid request"


class Unauthorized(PackyardError):
    status, code, title = 401, "unauthorized", "Missing or invalid credentials"


class Forbidden(PackyardError):
    status, code, title = 403, "forbidden", "Forbidden"


class UnsupportedMediaType(PackyardError):
    status, code, title = 415, "unsupported_media_type", "Unsupported media type"


class NotFound(PackyardError):
    status, code, title = 404, "not_found", "Not found"


class IdempotencyKeyRequired(PackyardError):
    status, code, title = 400, "idempotency_key_required", "Idempotency-Key header required"


class IdempotencyKeyReused(PackyardError):
    status, code, title = 422, "idempotency_key_reused", "Idempotency-Key reused with a different request"


class OperationInProgress(PackyardError):
    status, code, title = 409, "operation_in_progress", "Another operation is in flight"


class VersionRequired(PackyardError):
    status, code, title = 428, "version_required", "If-Match required"


class VersionConflict(PackyardError):
    status, code, title = 412, "version_conflict", "Version conflict"


class PlanChanged(PackyardError):
    status, code, title = 409, "plan_changed", "Plan changed since preview"


class NeedsConsent(PackyardError):
    status, code, title = 403, "needs_consent", "Permissions need consent"


class ConsentRejected(PackyardError):
    """The owner rejected the exact plan. Also the errorType the consent wait fails with."""

    status, code, title = 403, "consent_rejected", "Consent rejected"


class ConsentExpired(PackyardError):
    status, code, title = 403, "consent_expired", "Consent expired"


class StaleAuthority(PackyardError):
    status, code, title = 409, "stale_authority", "Stale authority"


class LimitExceeded(PackyardError):
    status, code, title = 409, "limit_exceeded", "Limit exceeded"


class InputLimitExceeded(PackyardError):
    """A request carries more than a bound of ``Limits`` allows (permissions, their resources or reasons, metadata,
    config): refused before anything is written, so nothing admitted can fail later on an item or payload limit.
    ``limit`` names the bound (the ``Limits`` field), ``max`` its value, ``actual`` what the request carried."""

    status, code, title = 422, "limit_exceeded", "Limit exceeded"

    def __init__(self, detail: str, *, limit: str, maximum: int, actual: int) -> None:
        super().__init__(detail, limit=limit, max=maximum, actual=actual)


class QuotaExceeded(PackyardError):
    status, code, title = 409, "quota_exceeded", "Storage quota exceeded"


class VersionExists(PackyardError):
    status, code, title = 409, "version_exists", "Version already published with different content"


class ReleaseUnavailable(PackyardError):
    status, code, title = 409, "release_unavailable", "Release unavailable"


class UploadExpired(PackyardError):
    status, code, title = 410, "upload_expired", "Upload session expired"


class UploadIncomplete(PackyardError):
    status, code, title = 409, "upload_incomplete", "Archive not uploaded yet"


class ArchiveRejected(PackyardError):
    """The archive or manifest broke a rule. ``sub_code`` says which; ``detail`` says where."""

    status, code, title = 422, "archive_rejected", "Archive rejected"

    def __init__(self, sub_code: ArchiveRejectCode, detail: str) -> None:
        super().__init__(detail, subCode=str(sub_code))
        self.sub_code = sub_code

    def __str__(self) -> str:
        return f"{self.sub_code}: {self.detail}"


class StoredItemInvalid(PackyardError):
    """A stored item failed validation on read: refuse it, never guess."""

    status, code, title = 500, "stored_item_invalid", "Stored item invalid"


class ClaimLost(PackyardError):
    """A fenced write found someone else's state: this worker must stop without writing."""

    status, code, title = 409, "claim_lost", "Claim lost"


class TransientStoreError(PackyardError):
    """A throttle or timeout from a store. Safe to retry; Step Functions Retry matches this errorType."""

    status, code, title = 503, "unavailable", "Temporarily unavailable"


class StoreFailure(PackyardError):
    """A store refused a request for a reason a retry will not fix. The detail names the service and the error
    code only: AWS error text never reaches a caller."""

    status, code, title = 500, "internal_error", "Internal error"


class MissingSetting(PackyardError):
    """A handler's required setting (an environment variable the template sets) is missing or empty."""

    status, code, title = 500, "internal_error", "Internal error"
