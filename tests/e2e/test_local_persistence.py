"""``packyard local --data DIR``: what the local stack kept survives a restart, and what it was doing when it was
killed converges after one (the maintenance sweeps settle it, as on AWS).

Each test runs its own stacks as real subprocesses on one data directory. The kills are either SIGKILL of an idle
stack or the fault hook ``PACKYARD_LOCAL_EXIT_AT`` (``devstack.persistence.install_exit_point``), which makes the
process ``os._exit(137)`` at a named step: deterministic, no timing involved.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from devstack import process as stack_process
from devstack.persistence import EXIT_AT, EXIT_CODE
from devstack.smoke import PERMISSION
from tests.e2e.helpers import ROOT, START_TIMEOUT, Cli, Stack, base_env, write_skill

pytestmark = pytest.mark.xdist_group("e2e")

LOCAL = (sys.executable, "-m", "packyard_cli", "local")
DEATH_TIMEOUT = 90.0  # how long a stack may take to reach its exit point once the request that leads there is made


def _start(root: Path, run: str, *, exit_at: str | None = None) -> Stack:
    state_dir, data = root / "state", root / "data"
    env = base_env(state_dir)
    if exit_at:
        env[EXIT_AT] = exit_at
    log = root / f"{run}.log"
    process, state = stack_process.start_stack(state_dir, log, "--data", str(data), env=env, timeout=START_TIMEOUT)
    assert state["data"] == str(data.resolve())
    return Stack(process=process, api=state["api"], aws=state["aws"], state_dir=state_dir, log=log)


@contextmanager
def _running(root: Path, run: str) -> Iterator[Stack]:
    stack = _start(root, run)
    try:
        yield stack
    finally:
        stack_process.stop_stack(stack.process)


def _kill(stack: Stack) -> None:
    stack.process.kill()  # SIGKILL: nothing of the stack's own shutdown runs
    stack.process.wait(30)


def _died_at_its_exit_point(stack: Stack) -> None:
    try:
        code = stack.process.wait(DEATH_TIMEOUT)
    except subprocess.TimeoutExpired:
        stack.process.kill()
        stack.process.wait()
        raise AssertionError(f"the stack did not reach its exit point:\n{stack.log_text()}") from None
    assert code == EXIT_CODE, stack.log_text()


def _http(cli: Cli) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {cli.token()}"
    return session


def _publish(cli: Cli, folder: Path, package: str, version: str, *extra: str) -> dict[str, Any]:
    published = cli("--json", "publish", str(folder), "-p", package, "--version", version, *extra)
    assert published.code == 0, published.output
    return dict(published.json())


def _installation(cli: Cli, ws: str, package: str) -> dict[str, Any] | None:
    listed = cli("--json", "ls", ws)
    assert listed.code == 0, listed.output
    found = [item for item in listed.json()["items"] if item["installationId"] == package]
    return found[0] if found else None


def _without_urls(view: Any) -> Any:
    """A view without its presigned URLs and their expiry (signed anew at every read)."""
    if isinstance(view, dict):
        return {k: _without_urls(v) for k, v in view.items() if not k.lower().endswith("url") and k != "expiresAt"}
    if isinstance(view, list):
        return [_without_urls(v) for v in view]
    return view


def _kms(stack: Stack) -> Any:
    import boto3

    return boto3.client(
        "kms", endpoint_url=stack.aws, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def _signing_alias(kms: Any) -> str:
    """The template's KMS alias (release signing): the one alias that is not AWS's own."""
    (alias,) = [a["AliasName"] for a in kms.list_aliases()["Aliases"] if not a["AliasName"].startswith("alias/aws/")]
    return str(alias)


def _swept(cli: Cli, at: str) -> dict[tuple[str, str], int]:
    swept = cli("sweep", "--at", at, "--output", "json")
    assert swept.code == 0, swept.output
    return {(row["sweep"], row["action"]): row["items"] for row in swept.json()["items"]}


def test_a_restart_keeps_a_published_installed_and_approved_package(tmp_path: Path) -> None:
    package, ws, tenant = "weather-skill", f"ws-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:10]}"
    folder = write_skill(tmp_path / "skill")

    # Given a stack on a data directory: a release published, installed after an owner approved its permission
    first = _start(tmp_path, "first")
    cli = Cli(first, tenant)
    token_before = cli.token()
    release = _publish(cli, folder, package, "1.0.0", "--permission", PERMISSION)
    installed = cli("install", f"{package}@1.0.0", "--workspace", ws)
    assert installed.code == 0, installed.output
    waiting = cli("--json", "approvals", ws)
    assert [item["installationId"] for item in waiting.json()["items"]] == [package], waiting.output
    approved = cli("approve", package, "--workspace", ws)
    assert approved.code == 0, approved.output
    before = _installation(cli, ws, package)
    assert before is not None and before["status"] == "active", before
    resolved_before = cli("--json", "resolved", ws)
    assert resolved_before.code == 0, resolved_before.output
    kms = _kms(first)
    alias = _signing_alias(kms)
    key_before = kms.describe_key(KeyId=alias)["KeyMetadata"]["KeyId"]
    signed = kms.sign(KeyId=alias, Message=b"statement", MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256")

    # When the stack is killed (SIGKILL) and started again on the same data directory
    _kill(first)
    with _running(tmp_path, "second") as second:
        cli = Cli(second, tenant)

        # Then the release, its archive, the installation and the approval are all there, unchanged
        shown = cli("--json", "releases", f"{package}@1.0.0")
        assert shown.code == 0, shown.output
        assert shown.json()["status"] == "published"
        assert shown.json()["archive"]["sha256"] == release["archive"]["sha256"]
        assert _installation(cli, ws, package) == before
        resolved = cli("--json", "resolved", ws).json()  # its manifest hash-checked from storage again
        assert _without_urls(resolved) == _without_urls(resolved_before.json())
        assert cli("--json", "approvals", ws).json()["items"] == []
        link = _http(cli).get(f"{second.api}/v1/packages/{package}/versions/1.0.0/archive")
        assert link.status_code == 200, link.text
        archive = requests.get(link.json()["url"], timeout=30)  # the archive's bytes, from the restored bucket
        assert archive.status_code == 200, archive.text
        assert hashlib.sha256(archive.content).hexdigest() == release["archive"]["sha256"]
        # a token minted before the restart still verifies (the signing key is kept)
        me = requests.get(f"{second.api}/v1/me", headers={"Authorization": f"Bearer {token_before}"}, timeout=30)
        assert me.status_code == 200, me.text
        # the signing key is the same KMS key: same id behind the alias, and it verifies what it signed before
        kms = _kms(second)
        assert kms.describe_key(KeyId=alias)["KeyMetadata"]["KeyId"] == key_before
        verified = kms.verify(
            KeyId=alias,
            Message=b"statement",
            MessageType="RAW",
            Signature=signed["Signature"],
            SigningAlgorithm="ECDSA_SHA_256",
        )
        assert verified["SignatureValid"] is True
        # the banner says what was loaded
        assert "kept across restarts" in second.log_text()
        # and no second stack starts on the same data while this one runs
        refused = subprocess.run(
            [*LOCAL, "--api-port", "0", "--aws-port", "0", "--data", str(tmp_path / "data")],
            cwd=ROOT,
            env=base_env(tmp_path / "other-state"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 1 and "used by another running local stack" in refused.stderr, refused.stderr

        # And the restarted stack goes on working, and keeps that too
        write_skill(folder, "v2")
        _publish(cli, folder, package, "1.1.0", "--permission", PERMISSION)
        updated = cli("update", f"{package}@1.1.0", "--workspace", ws)
        assert updated.code == 0, updated.output
    with _running(tmp_path, "third") as third:
        after = _installation(Cli(third, tenant), ws, package)
        assert after is not None and after["release"]["version"] == "1.1.0", after


def test_a_publish_killed_while_it_verified_and_a_half_done_upload_converge_after_a_restart_and_the_sweep(
    tmp_path: Path,
) -> None:
    package, tenant = "weather-skill", f"t-{uuid.uuid4().hex[:10]}"
    folder = write_skill(tmp_path / "skill")
    built_dir = tmp_path / "out"

    # Given a stack that dies as its publish workflow invokes the Publish function (the archive verified), while
    # another upload of the tenant has its archive stored but was never completed
    dying = _start(tmp_path, "dying", exit_at="invoke:PublishFunction")
    cli = Cli(dying, tenant)
    http = _http(cli)
    built = cli("build", str(folder), "--out", str(built_dir))
    assert built.code == 0, built.output
    manifest = json.loads((tmp_path / "out.manifest.json").read_text())
    archive = (tmp_path / "out.tar.gz").read_bytes()
    body = {"manifest": manifest, "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()}}
    sessions = {}
    for version in ("1.0.0", "2.0.0"):
        created = http.post(f"{dying.api}/v1/packages/{package}/versions/{version}/uploads", json=body)
        assert created.status_code == 201, created.text
        sessions[version] = created.json()
        put = requests.put(sessions[version]["upload"]["url"], data=archive, timeout=30)
        assert put.status_code == 200, put.text
    upload, half_done = sessions["1.0.0"], sessions["2.0.0"]
    completed = http.post(f"{dying.api}/v1/uploads/{upload['uploadId']}/complete")
    assert completed.status_code in (200, 202), completed.text

    # When it dies there, and is started again on the same data
    _died_at_its_exit_point(dying)
    with _running(tmp_path, "after") as after:
        cli = Cli(after, tenant)
        http = _http(cli)
        uploads = f"{after.api}/v1/uploads/{upload['uploadId']}"
        assert http.get(uploads).json()["state"] == "verifying"  # what it was doing is still on record
        abandoned = f"{after.api}/v1/uploads/{half_done['uploadId']}"
        assert http.get(abandoned).json()["state"] == "awaiting_upload"

        # Then the sweep past the reservation window starts its verification again (no run of it can be left: an
        # Express run lasts 5 minutes, nothing is looked up; it used to be looked up, found ended and rejected), and
        # the new run publishes it; the half-done one expires, its reservation returned
        reserved = cli("--json", "usage").json()["items"][0]["usedBytes"]  # two sessions of the same content
        swept = _swept(cli, "+1h")
        assert swept.get(("upload", "resumed")) == 1, swept
        assert swept.get(("upload", "expired")) == 1, swept  # the half-done one, at its deadline
        settled = http.get(uploads, params={"wait": 20}).json()
        assert settled["state"] == "published", settled
        assert http.get(abandoned).json()["state"] == "expired"
        release = http.get(f"{after.api}/v1/packages/{package}/versions/1.0.0").json()
        assert release["archive"]["sha256"] == hashlib.sha256(archive).hexdigest()
        usage = cli("--json", "usage")
        assert usage.code == 0, usage.output
        # the expired session's reservation returned, the published one's now its blobs: half of what two reserved
        assert 2 * usage.json()["items"][0]["usedBytes"] == reserved, usage.output


def test_an_install_killed_after_its_commit_converges_after_a_restart_and_the_sweep(tmp_path: Path) -> None:
    package, ws, tenant = "weather-skill", f"ws-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:10]}"
    folder = write_skill(tmp_path / "skill")
    with _running(tmp_path, "publish") as first:
        _publish(Cli(first, tenant), folder, package, "1.0.0")

    # Given a stack that dies right after an install's Commit wrote the installation (Settle has not run)
    dying = _start(tmp_path, "dying", exit_at="after:TransactWriteItems@workspace.commit")
    cli = Cli(dying, tenant)
    install = subprocess.Popen(
        [sys.executable, "-m", "packyard_cli", "install", f"{package}@1.0.0", "--workspace", ws],
        cwd=ROOT,
        env=cli.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _died_at_its_exit_point(dying)
    install.wait(60)

    # When it is started again on the same data
    with _running(tmp_path, "after") as after:
        cli = Cli(after, tenant)
        # the installation is in place: the commit settled its operation in the same write (docs/decisions.md,
        # "Commit settles"), so the Settle that never ran had nothing left to decide
        installation = _installation(cli, ws, package)
        assert installation is not None and installation["release"]["version"] == "1.0.0", installation

        # Then the sweep past the operation's lease finds nothing left to settle or restart
        swept = _swept(cli, "+1h")
        assert swept.get(("operation", "settled")) is None and swept.get(("operation", "started")) is None, swept
        installation = _installation(cli, ws, package)
        assert installation is not None and installation["status"] == "active", installation
        # and the workspace takes the next operation (the slot was let go)
        write_skill(folder, "v2")
        _publish(cli, folder, package, "1.1.0")
        updated = cli("update", f"{package}@1.1.0", "--workspace", ws)
        assert updated.code == 0, updated.output
        assert _installation(cli, ws, package)["release"]["version"] == "1.1.0"  # type: ignore[index]
