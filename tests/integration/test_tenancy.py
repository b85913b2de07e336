"""Another tenant's token on every workspace route: reads are 404, mutations reach nothing of the owner's."""

from __future__ import annotations

from packyard_cli.build import build_from_files

WS = "ws-1"


def _snapshot(acme):
    inst = acme.get(f"/v1/workspaces/{WS}/installations/hello").body
    return inst["version"], inst["status"], inst["release"]["version"]


def test_foreign_tenant_sees_none_of_a_workspace_and_changes_nothing(acme, globex):
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"mine\n"}))
    op = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k1"))
    before = _snapshot(acme)
    op_path = f"/v1/workspaces/{WS}/operations/{op['operationId']}"

    assert globex.get(f"/v1/workspaces/{WS}/installations/hello").status == 404
    assert globex.get(op_path).status == 404
    assert globex.get(f"/v1/workspaces/{WS}/installations").body["items"] == []
    assert globex.get(f"/v1/workspaces/{WS}/resolved").body["items"] == []
    assert globex.rollback(WS, "hello", key="g1", if_match='"1"').status == 404
    # the owner's release does not exist for the other tenant
    assert globex.install(WS, "hello", "hello", "1.0.0", key="g2").code == "release_unavailable"
    preview = globex.post(f"/v1/workspaces/{WS}/installations/hello/preview", {"package": "hello", "version": "1.0.0"})
    assert preview.code == "release_unavailable"
    # uninstalling in one's own (empty) workspace is a no-op there, and only there
    assert globex.uninstall(WS, "hello", key="g3").body["outcome"] == {"result": "succeeded", "code": "not_installed"}
    # the same Idempotency-Key in another tenant names another operation
    assert globex.install(WS, "hello", "hello", "1.0.0", key="k1").code == "release_unavailable"

    assert _snapshot(acme) == before
    assert acme.get(op_path).body["outcome"] == {"result": "succeeded"}
