"""The two ways a request asks to wait (``packyard.operations.waiting``): the ``wait`` query parameter of a read
(``?wait=N``, validated: 1-20 whole seconds, anything else is the API's ``400 invalid_request``) and the ``Prefer``
header of a mutation (RFC 7240 ``wait=N``; a preference not understood is ignored, as the RFC asks)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from packyard.operations.waiting import MAX_WAIT_SECONDS

WaitSeconds = Annotated[
    int | None,
    Query(
        ge=1,
        le=MAX_WAIT_SECONDS,
        description="seconds (1-20) to wait for it to come to rest before answering",
    ),
]
PreferWait = Annotated[
    str | None,
    Header(
        alias="prefer",
        description=(
            "RFC 7240 `wait=N` (seconds, up to 20): answer once it comes to rest or N passes, "
            "200 when it finished, 202 while it runs; `Preference-Applied` says the wait applied"
        ),
    ),
]


def applied(seconds: int) -> dict[str, str]:
    """The response header saying the server honoured ``Prefer: wait`` (RFC 7240 section 3)."""
    return {"Preference-Applied": f"wait={seconds}"}
