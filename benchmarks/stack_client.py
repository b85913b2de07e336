"""The local stack (``packyard local``) as a subprocess, and an HTTP client of it, for the benchmarks that drive the
stack as a user would: publish over the API and the presigned URL, install and wait for the operation to settle.

Not a benchmark itself: ``bench_local_stack.py`` uses it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from devstack.process import STRIPPED_PREFIXES, stack_environment, start_stack, stop_stack  # noqa: E402
from packyard_cli import tokens  # noqa: E402
from packyard_cli.build import BuiltPackage  # noqa: E402

START_TIMEOUT = 90.0
SETTLE_TIMEOUT = 60.0


class Failed(Exception):
    """A request answered something the journey did not expect (counted as an error by the benchmarks)."""


@dataclass
class StackProcess:
    process: subprocess.Popen[bytes]
    api: str
    aws: str
    state_dir: Path
    log: Path

    @classmethod
    def start(cls, state_dir: Path, *extra_args: str) -> StackProcess:
        """``packyard local`` (with ``extra_args``) on ports the OS picks (``devstack.process``), its log in the state
        dir."""
        log = state_dir / "local.log"
        # nor the benchmarks' own Powertools settings (bench_cold_start's quiet defaults)
        env = stack_environment({"PACKYARD_LOCAL_DIR": str(state_dir)}, strip=(*STRIPPED_PREFIXES, "POWERTOOLS_"))
        process, state = start_stack(state_dir, log, *extra_args, env=env, timeout=START_TIMEOUT)
        return cls(process=process, api=state["api"], aws=state["aws"], state_dir=state_dir, log=log)

    def pids(self) -> list[int]:
        """The stack's processes: ``packyard local`` and its children (the API process, devstack.api_process)."""
        found = [self.process.pid]
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            found.extend(int(child) for child in children)
        return found

    def rss_mib(self) -> float:
        """The resident set size of the stack's processes now (VmRSS summed), in MiB."""
        return sum(self.process_rss_mib(pid) for pid in self.pids())

    @staticmethod
    def process_rss_mib(pid: int) -> float:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """CPU time the stack's processes have used so far (user + system, ``/proc/<pid>/stat``, summed)."""
        return sum(self.process_cpu_seconds(pid) for pid in self.pids())

    def process_cpu_seconds(self, pid: int | None = None) -> float:
        """CPU time one of them (by default ``packyard local`` itself, where the stack's state is) has used."""
        fields = Path(f"/proc/{pid or self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def memory_report(self, timeout: float = 300.0) -> dict[str, Any] | None:
        """What the stack's memory holds (``devstack.memory.write_report``: RSS, threads, moto's stored data), which it
        writes to its state dir on SIGUSR1; None if it does not answer in time."""
        path = self.state_dir / "memory.json"
        path.unlink(missing_ok=True)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                report: dict[str, Any] = json.loads(path.read_text("utf-8"))
                return report
            time.sleep(0.1)
        return None

    def stop(self) -> None:
        stop_stack(self.process)


@dataclass
class Client:
    """One caller of the stack's API, with its own connection (keep-alive) and token."""

    stack: StackProcess
    tenant: str
    poll_seconds: float = 0.01
    poll_backoff: float = 1.0  # each wait is this many times the last, up to poll_cap
    poll_cap: float = 0.5
    # seconds to let the service wait for the answer (``Prefer: wait=N`` on a change, ``?wait=N`` on a read, as the
    # CLI asks since issue 23); None: poll as above
    wait_seconds: int | None = None
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        key = tokens.load_key(self.stack.state_dir)
        if key is None:
            raise RuntimeError("the local stack wrote no key")
        self.session.headers["Authorization"] = f"Bearer {key.mint(tenant=self.tenant, subject='bench')}"

    def _call(self, method: str, path: str, expect: tuple[int, ...], **kwargs: Any) -> requests.Response:
        response = self.session.request(method, f"{self.stack.api}{path}", timeout=60, **kwargs)
        if response.status_code not in expect:
            raise Failed(f"{method} {path} -> {response.status_code} {response.text[:300]}")
        return response

    # ---- publish

    def publish(self, package: str, version: str, built: BuiltPackage) -> dict[str, float]:
        """The whole journey; returns the seconds of each step (``published`` = complete → published)."""
        started = time.perf_counter()
        created = self._call(
            "POST", f"/v1/packages/{package}/versions/{version}/uploads", (201,), json=built.upload_request()
        ).json()
        put_at = time.perf_counter()
        if created.get("uploadRequired", True):
            uploaded = requests.put(created["upload"]["url"], data=built.archive, timeout=60)
            if uploaded.status_code != 200:
                raise Failed(f"PUT archive -> {uploaded.status_code}")
        complete_at = time.perf_counter()
        upload = self._call("POST", f"/v1/uploads/{created['uploadId']}/complete", (200, 202)).json()
        state = upload["state"]
        deadline = time.perf_counter() + SETTLE_TIMEOUT
        while state == "verifying":
            if time.perf_counter() > deadline:
                raise Failed(f"upload {created['uploadId']} still verifying after {SETTLE_TIMEOUT} s")
            time.sleep(self.poll_seconds)
            upload = self._call("GET", f"/v1/uploads/{created['uploadId']}", (200,)).json()
            state = upload["state"]
        done = time.perf_counter()
        if state != "published":
            raise Failed(f"upload {created['uploadId']} ended {state}: {upload.get('rejection')}")
        return {"create": put_at - started, "upload": complete_at - put_at, "published": done - complete_at}

    # ---- installation operations

    def change(
        self,
        method: str,
        workspace: str,
        installation: str,
        body: dict[str, Any] | None = None,
        if_match: str | None = None,
    ) -> dict[str, Any]:
        """PUT or DELETE one installation with a fresh Idempotency-Key; returns the admitted operation."""
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        if self.wait_seconds is not None:
            headers["Prefer"] = f"wait={self.wait_seconds}"
        if if_match is not None:
            headers["If-Match"] = if_match
        path = f"/v1/workspaces/{workspace}/installations/{installation}"
        operation: dict[str, Any] = self._call(method, path, (200, 202), json=body, headers=headers).json()
        return operation

    def settle(self, workspace: str, operation: dict[str, Any]) -> dict[str, Any]:
        """Poll the operation until it settles (or read it with ``?wait=N`` in wait mode); it must have succeeded."""
        deadline = time.perf_counter() + SETTLE_TIMEOUT
        pause = self.poll_seconds
        while operation["state"] != "settled":
            if time.perf_counter() > deadline:
                raise Failed(
                    f"operation {operation['operationId']} still {operation['state']} after {SETTLE_TIMEOUT} s"
                )
            path = f"/v1/workspaces/{workspace}/operations/{operation['operationId']}"
            if self.wait_seconds is not None:
                operation = self._call("GET", path, (200,), params={"wait": self.wait_seconds}).json()
                continue
            time.sleep(pause)
            pause = min(self.poll_cap, pause * self.poll_backoff)
            operation = self._call("GET", path, (200,)).json()
        if operation["outcome"]["result"] != "succeeded":
            raise Failed(f"operation {operation['operationId']} settled {operation['outcome']}")
        return operation

    def installation_version(self, workspace: str, installation: str) -> str:
        response = self._call("GET", f"/v1/workspaces/{workspace}/installations/{installation}", (200,))
        return response.headers["ETag"]
