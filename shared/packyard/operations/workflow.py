"""Starting the install state machine for an operation: the execution name is the operation id (plus the attempt),
so starting twice is harmless and a finished execution of that name is not run again."""

from __future__ import annotations

from typing import Any

from packyard.config import required
from packyard.operations.models import Operation
from packyard.store import workflows


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


def status(op: Operation) -> str | None:
    """The status of the execution of the operation's current attempt (looked up, never guessed); None when it was
    never started."""
    machine = required("install_state_machine_arn").install_state_machine_arn
    return workflows.execution_status(workflows.execution_arn(machine, op.execution_name()))


def has_ended(op: Operation) -> bool:
    """Whether the execution of the operation's current attempt ran and is over."""
    current = status(op)
    return current is not None and current != "RUNNING"
