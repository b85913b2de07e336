"""Starting the install state machine (Express) for an operation.

Express runs at least once and does not deduplicate executions by name, so starting one is never "the" execution of
an operation: its Plan step claims the operation (``runner``, fenced on ``version``) and a second run of the same
operation finds it claimed and ends (``Duplicate``). Starting again is therefore always harmless, and every start
follows a write that renewed the operation's lease (admission, a resume, a decision, a sweep restart): the lease
(``operation_lease_seconds``, 15 min) outlasts any Express run (5 min), so an operation past its lease has no run
left, which is what the sweep and admission's replay decide on (no execution is ever looked up).
"""

from __future__ import annotations

from typing import Any

from packyard.config import required
from packyard.operations.models import Operation
from packyard.operations.timing import lease_until
from packyard.store import workflows, workspace


def start(op: Operation) -> None:
    payload: dict[str, Any] = {
        "tenant": op.tenant,
        "workspace": op.workspace,
        "installationId": op.installation_id,
        "operationId": op.operation_id,
        # Settle acts only on this attempt: a retried Settle of an earlier one must not touch a resumed operation
        "attempt": op.attempt,
    }
    if op.target is not None and not op.target_checked:
        # planning reads this release beside the operation (one BatchGetItem) to check it is still published
        payload["release"] = {"package": op.target.package, "version": op.target.version}
    workflows.start(required("install_state_machine_arn").install_state_machine_arn, op.execution_name(), payload)


def restart(op: Operation, now: int) -> Operation:
    """A new execution for an operation past its lease (so no run is left: see above): fenced on its version, one
    more restart, no runner (the new run claims it), the lease (and the slot's) renewed; then the run is started,
    and it replays the phases already recorded. ClaimLost when the operation moved meanwhile."""
    restarted = op.model_copy(
        update={
            "restarts": op.restarts + 1,
            "runner": None,
            "version": op.version + 1,
            "lease_until": lease_until(now),
            "updated_at": now,
        }
    )
    workspace.transition(op, restarted, slot_lease=restarted.lease_until)
    start(restarted)
    return restarted
