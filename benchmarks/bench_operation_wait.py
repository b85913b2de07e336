"""What waiting for an operation inside a Lambda costs, against the polls it saves (issue 23 item 3).

On the local stack (moto, the real install state machine, the handlers as deployed, in-process) each lifecycle
(install, update, rollback, uninstall) is run twice:

* **waiting**: the mutation with ``Prefer: wait=20``; the admission handler's wait is recorded (seconds it held the
  invocation, the operation reads it made), and every ``GetItem`` the admission function made is counted with
  botocore hooks (``devstack.counting.record_aws_calls``), so the reads are measured, not assumed;
* **polling**: the mutation without it, then the CLI's former loop (``GET …/operations/{op}`` at once, then every
  200 ms until at rest): the polls it made.

Then both are priced at the list prices of ``simulate_capacity.PRICE`` (us-east-1): the waiting Lambda's extra
GB-seconds at the template's memory size (512 MB: Globals) plus its GetItems (1 strongly consistent RRU each, the
operation item is < 4 KB), against one poll = 1 API Gateway request + 1 Lambda request + ``DURATION`` of a warm
invocation + 1 GetItem. The settle times are the local stack's (moto on a shared 2-core machine), not AWS's; the
per-second figures (what a second of waiting costs, what a second of polling costs) do not depend on them.

Run: .venv/bin/python benchmarks/bench_operation_wait.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import devstack  # noqa: E402
from benchmarks.simulate_capacity import DURATION, PRICE  # noqa: E402
from devstack.api import ApiResponse, LocalApi  # noqa: E402
from devstack.caller import Caller  # noqa: E402
from devstack.counting import record_aws_calls  # noqa: E402
from packyard.operations import waiting  # noqa: E402
from packyard_cli.build import build_from_files  # noqa: E402

WS = "ws-bench"
MEMORY_GB = 0.5  # template.yaml Globals MemorySize 512 (QueriesFunction, AdmissionFunction)
CLI_POLL_SECONDS = 0.2  # the CLI's former loop: every 200 ms for the first 15 s
STOPS = {"settled", "awaiting_consent", "pending"}


def poll_cost() -> float:
    memory, seconds = DURATION["default"]
    return (
        PRICE["apigw_request"]
        + PRICE["lambda_request"]
        + memory * seconds * PRICE["lambda_gb_second"]
        + PRICE["dynamodb_rru"]
    )


def wait_cost(seconds: float, reads: int) -> float:
    return MEMORY_GB * seconds * PRICE["lambda_gb_second"] + reads * PRICE["dynamodb_rru"]


def _steps(caller: Caller, round_no: int, prefer: dict[str, str]) -> list[tuple[str, Any]]:
    mode = "w" if prefer else "p"
    path = caller.installation_path(WS, f"app-{round_no}-{mode}")

    def headers(step: str, version: int | None = None) -> dict[str, str]:
        matched = {"If-Match": f'"{version}"'} if version else {}
        return {"Idempotency-Key": f"{step}{round_no}-{mode}", **matched, **prefer}

    return [
        ("install", lambda: caller.put(path, {"package": "hello", "version": "1.0.0"}, headers=headers("i"))),
        ("update", lambda: caller.put(path, {"package": "hello", "version": "1.1.0"}, headers=headers("u", 1))),
        ("rollback", lambda: caller.post(f"{path}/rollback", headers=headers("r", 2))),
        ("uninstall", lambda: caller.delete(path, headers=headers("d", 3))),
    ]


def _poll(caller: Caller, admitted: ApiResponse) -> int:
    op = admitted.body
    polls = 0
    while True:  # the CLI's former loop
        op = caller.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body
        polls += 1
        if op["state"] in STOPS:
            return polls
        time.sleep(CLI_POLL_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    waits: list[waiting.Waited] = []
    until_at_rest = waiting.until_at_rest

    def recorded(*a: Any, **k: Any) -> waiting.Waited:
        waited = until_at_rest(*a, **k)
        waits.append(waited)
        return waited

    waiting.until_at_rest = recorded
    rows: dict[str, dict[str, list[float]]] = {}
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), "t-bench")
        caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
        caller.publish("hello", "1.1.0", build_from_files({"SKILL.md": b"v2\n"}))
        for round_no in range(args.rounds):
            for kind, step in _steps(caller, round_no, {"Prefer": "wait=20"}):
                before = len(waits)
                with record_aws_calls() as recorder:
                    answer = step()
                assert answer.status == 200 and answer.body["state"] == "settled", answer.body
                waited = waits[before]
                got = [c for c in recorder.of("AdmissionFunction") if c.operation == "GetItem"]
                row = rows.setdefault(kind, {"wait s": [], "wait reads": [], "GetItem": [], "polls": []})
                row["wait s"].append(waited.elapsed)
                row["wait reads"].append(waited.reads)
                row["GetItem"].append(len(got))
            for kind, step in _steps(caller, round_no, {}):
                admitted = step()
                assert admitted.status == 202, admitted.body
                rows[kind]["polls"].append(_poll(caller, admitted))
                devstack.wait_for_execution(caller._execution_arn(admitted.body), timeout=60)

    per_poll = poll_cost()
    print(f"one poll: ${per_poll * 1e6:.3f} per million (API request, Lambda request + 40 ms at 512 MB, 1 RRU)")
    print(f"one second of a waiting Lambda at 512 MB: ${wait_cost(1.0, 0) * 1e6:.3f} per million seconds")
    print(f"break-even: a second of waiting costs {wait_cost(1.0, 0) / per_poll:.1f} polls")
    print()
    header = "lifecycle   wait s (median)  waiter reads  admission GetItem  polls saved  wait $/1,000  polls $/1,000"
    print(header)
    for kind, row in rows.items():
        seconds = statistics.median(row["wait s"])
        reads = statistics.median(row["wait reads"])
        polls = statistics.median(row["polls"])
        print(
            f"{kind:<11} {seconds:>15.2f} {reads:>13.1f} {statistics.median(row['GetItem']):>18.1f} {polls:>12.1f} "
            f"{wait_cost(seconds, int(reads)) * 1000:>13.5f} {polls * per_poll * 1000:>14.5f}"
        )


if __name__ == "__main__":
    main()
