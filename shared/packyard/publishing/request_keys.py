"""An optional Idempotency-Key on a request that is idempotent by nature (``POST /v1/uploads/{id}/complete``,
``DELETE /v1/packages/{p}/versions/{v}``): the same request again under the key is answered as it would be anyway;
another request under it is ``422 idempotency_key_reused``, as for every other mutation.

The key is bound before the request does anything, so a request that crashed after binding is completed by its
retry under the same key. Bindings are kept ``request_key_retention_seconds`` (from the latest use).
"""

from __future__ import annotations

from typing import Any

from packyard import clock
from packyard.config import limits
from packyard.errors import IdempotencyKeyReused
from packyard.operations.preconditions import check_idempotency_key, digest
from packyard.store import request_keys


def bind(tenant: str, idempotency_key: str | None, request: dict[str, Any]) -> None:
    """Refuse ``request`` when its key already names another request of the tenant (no key: nothing to check)."""
    if idempotency_key is None:
        return
    checked = check_idempotency_key(idempotency_key)
    now = clock.now()
    retain_until = now + limits().request_key_retention_seconds
    if not request_keys.bind(tenant, checked, digest(request), now=now, retain_until=retain_until):
        raise IdempotencyKeyReused("Idempotency-Key already used for a different request")
