"""AWS requests per publish (DynamoDB, S3, Step Functions), counted with botocore event hooks on moto.

Prints a table per service/operation, averaged over several publishes of distinct content, plus the same for an
idempotent re-publish and a rejected upload. The client's own polling of DescribeExecution is left out: it is
not work the service does.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import devstack  # noqa: E402
from devstack.api import LocalApi  # noqa: E402
from devstack.caller import Caller  # noqa: E402
from devstack.counting import count_aws_requests  # noqa: E402
from packyard_cli.build import build_from_files  # noqa: E402

RUNS = 10
POLLING = ("stepfunctions", "DescribeExecution")


def measure(label: str, runs: int, action) -> tuple[str, Counter]:
    total: Counter = Counter()
    for i in range(runs):
        with count_aws_requests() as counted:
            action(i)
        total.update({k: v for k, v in counted.items() if k != POLLING})
    return label, Counter({k: v / runs for k, v in total.items()})


def main() -> None:
    console = Console()
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), "t-bench")

        def publish_new(i: int) -> None:
            final = caller.publish("bench", f"1.0.{i}", build_from_files({"SKILL.md": f"content {i}\n".encode()}))
            assert final["state"] == "published", final

        def republish(i: int) -> None:
            response = caller.request_upload("bench", "1.0.0", build_from_files({"SKILL.md": b"content 0\n"}))
            assert response.status == 200, response.body

        def rejected(i: int) -> None:
            honest = build_from_files({"SKILL.md": f"honest {i}\n".encode()})
            tampered = build_from_files({"SKILL.md": f"tamper {i}\n".encode()}).archive
            final = caller.publish("bench", f"2.0.{i}", honest, archive=tampered)
            assert final["state"] == "rejected", final

        results = [
            measure("publish (new content)", RUNS, publish_new),
            measure("re-publish identical (idempotent)", RUNS, republish),
            measure("rejected upload", RUNS, rejected),
        ]

    for label, counts in results:
        table = Table(title=f"AWS requests per {label} (mean of {RUNS})")
        table.add_column("service")
        table.add_column("operation")
        table.add_column("requests", justify="right")
        by_service: Counter = Counter()
        for (service, operation), n in sorted(counts.items()):
            table.add_row(service, operation, f"{n:g}")
            by_service[service] += n
        for service, n in sorted(by_service.items()):
            table.add_row(f"[bold]{service}", "[bold]total", f"[bold]{n:g}")
        table.add_row("[bold]all", "", f"[bold]{sum(by_service.values()):g}")
        console.print(table)


if __name__ == "__main__":
    main()
