"""Bad input gets problem+json with a stable code; other tenants see nothing."""

from __future__ import annotations

import pytest

from packyard_cli.build import build_from_files

BUILT = build_from_files({"SKILL.md": b"# hi\n"})


def test_malformed_json_is_invalid_request(acme):
    response = acme.post("/v1/packages/p/versions/1.0.0/uploads", "{not json")

    assert response.status == 400
    assert response.code == "invalid_request"
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"manifest": BUILT.manifest},
        {"manifest": BUILT.manifest, "archive": {"size": "big", "sha256": BUILT.archive_sha256}},
        {"manifest": BUILT.manifest, "archive": {"size": 10, "sha256": "XYZ"}},
        {"manifest": "nope", "archive": {"size": 10, "sha256": BUILT.archive_sha256}},
    ],
    ids=["empty", "missing-archive", "size-wrong-type", "bad-sha", "manifest-wrong-type"],
)
def test_wrong_types_and_missing_fields_are_invalid_request(acme, body):
    response = acme.post("/v1/packages/p/versions/1.0.0/uploads", body)

    assert response.status == 400
    assert response.code == "invalid_request"


def test_manifest_with_wrong_field_types_names_the_problem(acme):
    manifest = {"protocolVersion": 1, "files": [{"path": "a", "size": -1, "sha256": "0" * 64}]}
    response = acme.post(
        "/v1/packages/p/versions/1.0.0/uploads",
        {"manifest": manifest, "archive": {"size": 10, "sha256": "0" * 64}},
    )

    assert response.status == 400
    assert response.code == "invalid_request"


@pytest.mark.parametrize("version", ["1.0", "latest", "01.0.0"])
def test_non_semver_version_is_invalid_request(acme, version):
    assert acme.request_upload("p", version, BUILT).code == "invalid_request"


def test_bad_package_name_is_invalid_request(acme):
    assert acme.request_upload("Bad_Name", "1.0.0", BUILT).code == "invalid_request"


def test_missing_tenant_claim_is_unauthorized(api):
    response = api.request("GET", "/v1/packages", claims={"sub": "x"})

    assert response.status == 401
    assert response.code == "unauthorized"


def test_unknown_route_is_not_found_problem(acme):
    assert acme.get("/v1/nothing-here").code == "not_found"


def test_foreign_tenant_upload_id_reads_as_not_found_and_cannot_complete(acme, globex):
    session = acme.request_upload("hello-skill", "1.0.0", BUILT).body

    assert globex.get(f"/v1/uploads/{session['uploadId']}").status == 404
    assert globex.post(f"/v1/uploads/{session['uploadId']}/complete").status == 404
    assert acme.get(f"/v1/uploads/{session['uploadId']}").body["state"] == "awaiting_upload"


def test_foreign_tenant_sees_no_packages_versions_or_archives_and_cannot_yank(acme, globex):
    acme.publish("hello-skill", "1.0.0", BUILT)

    assert globex.get("/v1/packages").body["items"] == []
    assert globex.get("/v1/packages/hello-skill").status == 404
    assert globex.get("/v1/packages/hello-skill/versions").status == 404
    assert globex.get("/v1/packages/hello-skill/versions/1.0.0").status == 404
    assert globex.get("/v1/packages/hello-skill/versions/1.0.0/archive").status == 404
    assert globex.delete("/v1/packages/hello-skill/versions/1.0.0").status == 404
    assert acme.get("/v1/packages/hello-skill/versions/1.0.0").body["status"] == "published"


def test_foreign_tenant_cursor_is_refused(acme, globex):
    import base64
    import json

    cursor = base64.urlsafe_b64encode(
        json.dumps({"pk": {"S": "TENANT#t-acme#PACKAGES"}, "sk": {"S": "PACKAGE#a"}}).encode()
    ).decode()

    assert globex.get("/v1/packages", query={"cursor": cursor}).code == "invalid_request"
