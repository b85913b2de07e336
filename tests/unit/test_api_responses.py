"""The API response models render exactly the documented JSON for every state of the domain objects behind them.

Why one module of ~600 lines: one literal expected body per route and state, which is the API contract itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from packyard.api import publishing_responses, query_responses, workspace_responses
from packyard.api.publishing_responses import (
    ApiModel,
    ArchiveLinkView,
    CreatedUploadView,
    ExistingReleaseView,
    PackagePage,
    PackageView,
    ReleaseDetailView,
    ReleaseManifestView,
    ReleasePage,
    ReleaseView,
    UploadView,
)
from packyard.api.query_responses import InstallationPage, ResolvedInstallationView, ResolvedView
from packyard.api.workspace_responses import InstallationView, OperationView, PreviewView

# Domain types (their modules are being moved: keep these imports together).
from packyard.installations.grants import Grant
from packyard.installations.models import Installation, ReleaseRef, plan_digest
from packyard.installations.scopes import Scope
from packyard.operations.models import Operation, Outcome
from packyard.publishing.models import ArchiveSource, Package, Rejection, Release, Upload

ARCHIVE = "a" * 64
MANIFEST = "b" * 64
CONTENT = "c" * 64
MANIFEST_2 = "d" * 64
ARCHIVE_2 = "e" * 64


def dump(view: ApiModel) -> dict[str, Any]:
    return view.model_dump(by_alias=True, mode="json")


# ---- uploads -----------------------------------------------------------------------------------------------------


def upload(state: str = "awaiting_upload", **changes: Any) -> Upload:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "upload_id": "up-1",
        "token": "secret",
        "package": "hello",
        "version": "1.0.0",
        "state": state,
        "source": ArchiveSource.UPLOAD,
        "archive_size": 2048,
        "archive_sha256": ARCHIVE,
        "manifest_digest": MANIFEST,
        "manifest_size": 300,
        "content_digest": CONTENT,
        "reserved_bytes": 2048,
        "created_at": 1000,
        "expires_at": 1900,
    }
    return Upload(**(fields | changes))


SESSION = {
    "uploadId": "up-1",
    "package": "hello",
    "version": "1.0.0",
    "uploadRequired": True,
    "archive": {"size": 2048, "sha256": ARCHIVE},
    "manifestDigest": MANIFEST,
    "contentDigest": CONTENT,
    "expiresAt": "1970-01-01T00:31:40Z",
}

UPLOAD_CASES = [
    pytest.param(upload(), 1500, {**SESSION, "state": "awaiting_upload"}, id="awaiting"),
    pytest.param(upload(), 1900, {**SESSION, "state": "expired"}, id="awaiting-past-deadline-reads-expired"),
    pytest.param(upload("expired"), 1500, {**SESSION, "state": "expired"}, id="expired"),
    pytest.param(
        upload(source=ArchiveSource.BLOB),
        1500,
        {**SESSION, "state": "awaiting_upload", "uploadRequired": False},
        id="blob-already-held",
    ),
    pytest.param(
        upload("verifying", execution_arn="arn:exec"),
        1500,
        {**SESSION, "state": "verifying", "executionArn": "arn:exec"},
        id="verifying",
    ),
    pytest.param(
        upload("verifying", execution_arn=""), 1500, {**SESSION, "state": "verifying"}, id="empty-execution-arn"
    ),
    pytest.param(
        upload("published", execution_arn="arn:exec", settled_at=1600),
        2000,
        {**SESSION, "state": "published", "executionArn": "arn:exec", "release": "/v1/packages/hello/versions/1.0.0"},
        id="published",
    ),
    pytest.param(
        upload(
            "rejected",
            execution_arn="arn:exec",
            rejection=Rejection(code="archive_rejected", sub_code="digest_mismatch", detail="SKILL.md"),
        ),
        1500,
        {
            **SESSION,
            "state": "rejected",
            "executionArn": "arn:exec",
            "rejection": {"code": "archive_rejected", "detail": "SKILL.md", "subCode": "digest_mismatch"},
        },
        id="rejected-with-sub-code",
    ),
    pytest.param(
        upload("rejected", rejection=Rejection(code="version_exists", sub_code="", detail="hello@1.0.0 is taken")),
        1500,
        {**SESSION, "state": "rejected", "rejection": {"code": "version_exists", "detail": "hello@1.0.0 is taken"}},
        id="rejected-without-sub-code",
    ),
]


@pytest.mark.parametrize(("session", "now", "expected"), UPLOAD_CASES)
def test_upload_view_renders_the_session_in_its_effective_state(session: Upload, now: int, expected: dict) -> None:
    assert dump(UploadView.of(session, now)) == expected


LINKS = {"self": "/v1/uploads/up-1", "complete": "/v1/uploads/up-1/complete"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param(
            "https://put.example/up-1",
            {
                **SESSION,
                "state": "awaiting_upload",
                "upload": {"method": "PUT", "url": "https://put.example/up-1", "headers": {}},
                "links": LINKS,
            },
            id="with-upload-url",
        ),
        pytest.param(None, {**SESSION, "state": "awaiting_upload", "links": LINKS}, id="nothing-to-upload"),
    ],
)
def test_created_upload_view_adds_where_to_send_the_archive_and_links(url: str | None, expected: dict) -> None:
    assert dump(CreatedUploadView.of(upload(), 1500, url)) == expected


# ---- packages and releases ---------------------------------------------------------------------------------------


def release(status: str = "published", **changes: Any) -> Release:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "package": "hello",
        "version": "1.0.0",
        "status": status,
        "manifest_digest": MANIFEST,
        "content_digest": CONTENT,
        "manifest_size": 300,
        "archive_sha256": ARCHIVE,
        "archive_size": 2048,
        "unpacked_size": 4096,
        "file_count": 2,
        "permissions": [
            {"kind": "api_read", "resource": "calendar"},
            {"kind": "network", "resource": "*", "reason": "fetches feeds"},
        ],
        "upload_id": "up-1",
        "published_at": 1600,
    }
    return Release(**(fields | changes))


RELEASE = {
    "package": "hello",
    "version": "1.0.0",
    "status": "published",
    "manifestDigest": MANIFEST,
    "contentDigest": CONTENT,
    "archive": {"sha256": ARCHIVE, "size": 2048},
    "unpackedSize": 4096,
    "fileCount": 2,
    "permissions": [
        {"kind": "api_read", "resource": "calendar"},
        {"kind": "network", "resource": "*", "reason": "fetches feeds"},
    ],
    "publishedAt": "1970-01-01T00:26:40Z",
}
YANKED = {**RELEASE, "status": "yanked", "yankedAt": "1970-01-01T00:28:20Z"}
RECEIPT = {
    "package": "hello",
    "version": "1.0.0",
    "manifestDigest": MANIFEST,
    "contentDigest": CONTENT,
    "archive": {"sha256": ARCHIVE, "size": 2048},
    "unpackedSize": 4096,
    "fileCount": 2,
    "uploadId": "up-1",
    "publishedAt": "1970-01-01T00:26:40Z",
}
STORED_MANIFEST = {"protocolVersion": 1, "files": [{"path": "SKILL.md", "size": 10, "sha256": ARCHIVE}], "metadata": {}}

PUBLISHING_CASES = [
    pytest.param(ReleaseView.of(release()), RELEASE, id="release"),
    pytest.param(ReleaseView.of(release("yanked", yanked_at=1700)), YANKED, id="release-yanked"),
    pytest.param(
        ReleaseView.of(release(permissions=[])), {**RELEASE, "permissions": []}, id="release-without-permissions"
    ),
    pytest.param(ReleaseDetailView.of(release()), {**RELEASE, "receipt": RECEIPT}, id="release-view"),
    pytest.param(
        ReleaseDetailView.of(release("yanked", yanked_at=1700)), {**YANKED, "receipt": RECEIPT}, id="yank-answer"
    ),
    pytest.param(
        ReleaseManifestView.with_manifest(release(), STORED_MANIFEST),
        {**RELEASE, "receipt": RECEIPT, "manifest": STORED_MANIFEST},
        id="release-with-manifest",
    ),
    pytest.param(
        ExistingReleaseView.of(release()),
        {"state": "published", "uploadRequired": False, "release": {**RELEASE, "receipt": RECEIPT}},
        id="identical-release-exists",
    ),
    pytest.param(
        ReleasePage.of([release(), release("yanked", yanked_at=1700)], None),
        {"items": [RELEASE, YANKED], "nextCursor": None},
        id="versions-last-page",
    ),
    pytest.param(ReleasePage.of([], "eyJwayI6e319"), {"items": [], "nextCursor": "eyJwayI6e319"}, id="versions-page"),
    pytest.param(
        ArchiveLinkView.of(release(), "https://get.example/hello-1.0.0.tar.gz", 2300),
        {
            "url": "https://get.example/hello-1.0.0.tar.gz",
            "expiresAt": "1970-01-01T00:38:20Z",
            "sha256": ARCHIVE,
            "size": 2048,
            "status": "published",
        },
        id="archive-link",
    ),
    pytest.param(
        ArchiveLinkView.of(release("yanked", yanked_at=1700), "https://get.example/a", 2300),
        {
            "url": "https://get.example/a",
            "expiresAt": "1970-01-01T00:38:20Z",
            "sha256": ARCHIVE,
            "size": 2048,
            "status": "yanked",
        },
        id="archive-link-yanked",
    ),
    pytest.param(
        PackageView.of(
            Package(tenant="acme", package="hello", created_at=900, latest_version="1.1.0", version_count=2)
        ),
        {"package": "hello", "latestVersion": "1.1.0", "versionCount": 2, "createdAt": "1970-01-01T00:15:00Z"},
        id="package",
    ),
    pytest.param(
        PackagePage.of(
            [Package(tenant="acme", package="hello", created_at=900, latest_version="1.1.0", version_count=2)], None
        ),
        {
            "items": [
                {"package": "hello", "latestVersion": "1.1.0", "versionCount": 2, "createdAt": "1970-01-01T00:15:00Z"}
            ],
            "nextCursor": None,
        },
        id="packages-page",
    ),
]


@pytest.mark.parametrize(("view", "expected"), PUBLISHING_CASES)
def test_publishing_views_render_the_documented_json(view: ApiModel, expected: dict) -> None:
    assert dump(view) == expected


def test_an_unavailable_release_has_no_archive_link() -> None:
    with pytest.raises(ValueError, match="unavailable"):
        ArchiveLinkView.of(release("unavailable"), "https://get.example/a", 2300)


# ---- installations, operations, preview, resolved ----------------------------------------------------------------

V1 = ReleaseRef(package="hello", version="1.0.0", manifest_digest=MANIFEST, archive_sha256=ARCHIVE, archive_size=2048)
V2 = ReleaseRef(package="hello", version="1.1.0", manifest_digest=MANIFEST_2, archive_sha256=ARCHIVE_2, archive_size=99)
V1_JSON = {
    "package": "hello",
    "version": "1.0.0",
    "manifestDigest": MANIFEST,
    "archiveSha256": ARCHIVE,
    "archiveSize": 2048,
}
V2_JSON = {
    "package": "hello",
    "version": "1.1.0",
    "manifestDigest": MANIFEST_2,
    "archiveSha256": ARCHIVE_2,
    "archiveSize": 99,
}


def installation(**changes: Any) -> Installation:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "workspace": "ws-1",
        "installation_id": "hello",
        "instance_id": "inst-1",
        "version": 3,
        "status": "active",
        "creation": "fresh",
        "package": "hello",
        "release": V2,
        "previous": V1,
        "scope": Scope(),
        "grants": [Grant(kind="api_read", resource="calendar"), Grant(kind="network", origin="workflow")],
        "grant_generation": 2,
        "config": {"greeting": "hi", "nested": {"off": None}},
        "last_operation_id": "op-3",
        "updated_at": 2500,
    }
    return Installation(**(fields | changes))


ACTIVE = installation()
IN_TASK = installation(previous=None, grants=[], grant_generation=0, config={}, scope=Scope(kind="task", id="t-9"))
REMOVED = installation(status="removed", release=None, previous=None, grants=[], scope=Scope(kind="session", id="s:1"))

ACTIVE_JSON = {
    "workspace": "ws-1",
    "installationId": "hello",
    "instanceId": "inst-1",
    "version": 3,
    "status": "active",
    "creation": "fresh",
    "package": "hello",
    "release": V2_JSON,
    "previous": V1_JSON,
    "scope": {"kind": "workspace", "id": None},
    "grants": [
        {"kind": "api_read", "resource": "calendar", "origin": "owner", "ceiling": "workspace"},
        {"kind": "network", "resource": "*", "origin": "workflow", "ceiling": "workspace"},
    ],
    "grantGeneration": 2,
    "config": {"greeting": "hi", "nested": {"off": None}},
    "lastOperationId": "op-3",
    "updatedAt": "1970-01-01T00:41:40Z",
    "etag": '"3"',
}
IN_TASK_JSON = {
    **ACTIVE_JSON,
    "previous": None,
    "scope": {"kind": "task", "id": "t-9"},
    "grants": [],
    "grantGeneration": 0,
    "config": {},
}
REMOVED_JSON = {
    **ACTIVE_JSON,
    "status": "removed",
    "release": None,
    "previous": None,
    "scope": {"kind": "session", "id": "s:1"},
    "grants": [],
}


def operation(**changes: Any) -> Operation:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "workspace": "ws-1",
        "operation_id": "op-4",
        "installation_id": "hello",
        "action": "put",
        "kind": "install",
        "state": "admitted",
        "version": 1,
        "request_digest": "r",
        "intent_digest": "i",
        "lease_until": 3000,
        "created_at": 2600,
        "updated_at": 2600,
    }
    return Operation(**(fields | changes))


OPERATION = {
    "operationId": "op-4",
    "workspace": "ws-1",
    "installationId": "hello",
    "kind": "install",
    "state": "admitted",
    "intent": "install-or-select",
    "origin": "owner",
    "attempt": 0,
    "createdAt": "1970-01-01T00:43:20Z",
    "updatedAt": "1970-01-01T00:43:20Z",
    "links": {"self": "/v1/workspaces/ws-1/operations/op-4"},
}
UNINSTALL_OF_NOTHING = operation(
    action="delete",
    kind="uninstall",
    state="settled",
    outcome=Outcome(result="succeeded", code="not_installed"),
    note="not_installed",
    settled_at=2600,
)


def resolved_item(inst: Installation) -> ResolvedInstallationView:
    return ResolvedInstallationView.of(inst, f"https://get.example/{inst.instance_id}", "https://get.example/manifest")


WORKSPACE_CASES = [
    pytest.param(InstallationView.of(ACTIVE), ACTIVE_JSON, id="installation"),
    pytest.param(InstallationView.of(IN_TASK), IN_TASK_JSON, id="installation-task-scope-no-previous"),
    pytest.param(InstallationView.of(REMOVED), REMOVED_JSON, id="installation-removed"),
    pytest.param(
        InstallationPage.of([ACTIVE, REMOVED], None),
        {"items": [ACTIVE_JSON, REMOVED_JSON], "nextCursor": None},
        id="installations-page",
    ),
    pytest.param(
        OperationView.of(operation(target=V1)),
        {**OPERATION, "release": {"package": "hello", "version": "1.0.0"}},
        id="operation-admitted",
    ),
    pytest.param(
        OperationView.of(UNINSTALL_OF_NOTHING),
        {
            **OPERATION,
            "kind": "uninstall",
            "state": "settled",
            "outcome": {"result": "succeeded", "code": "not_installed"},
            "note": "not_installed",
            "settledAt": "1970-01-01T00:43:20Z",
        },
        id="operation-settled-at-admission",
    ),
    pytest.param(
        OperationView.of(
            operation(
                kind="update",
                state="settled",
                version=6,
                intent="create-only",
                origin="workflow",
                target=V2,
                plan=ACTIVE,
                outcome=Outcome(result="refused", status=409, code="stale_authority", detail="lost the slot"),
                settled_at=2700,
                superseded_by="op-5",
                updated_at=2700,
            )
        ),
        {
            **OPERATION,
            "kind": "update",
            "state": "settled",
            "intent": "create-only",
            "origin": "workflow",
            "updatedAt": "1970-01-01T00:45:00Z",
            "release": {"package": "hello", "version": "1.1.0"},
            "installationVersion": 3,
            "outcome": {"result": "refused", "status": 409, "code": "stale_authority", "detail": "lost the slot"},
            "settledAt": "1970-01-01T00:45:00Z",
            "supersededBy": "op-5",
        },
        id="operation-settled-refused",
    ),
    pytest.param(
        OperationView.of(
            operation(state="pending", version=4, target=V1, phase="consent", attempt=2, error_code="X", supersedes="o")
        ),
        {
            **OPERATION,
            "state": "pending",
            "attempt": 2,
            "release": {"package": "hello", "version": "1.0.0"},
            "phase": "consent",
            "errorCode": "X",
            "supersedes": "o",
        },
        id="operation-pending",
    ),
    pytest.param(
        PreviewView.of(UNINSTALL_OF_NOTHING, None),
        {"kind": "uninstall", "note": "not_installed", "plan": None, "planDigest": None},
        id="preview-settled-at-admission",
    ),
    pytest.param(
        PreviewView.of(operation(target=V2), ACTIVE),
        # the digest is the domain's plan_digest (what admission compares), not something this contract fixes
        {"kind": "install", "plan": ACTIVE_JSON, "planDigest": plan_digest(ACTIVE)},
        id="preview-planned",
    ),
    pytest.param(
        ResolvedView.of("ws-1", [resolved_item(ACTIVE), resolved_item(IN_TASK)], 3400),
        {
            "workspace": "ws-1",
            "items": [
                {
                    "installationId": "hello",
                    "instanceId": "inst-1",
                    "version": 3,
                    "package": "hello",
                    "release": "1.1.0",
                    "manifestDigest": MANIFEST_2,
                    "archive": {"sha256": ARCHIVE_2, "size": 99, "url": "https://get.example/inst-1"},
                    "manifestUrl": "https://get.example/manifest",
                    "scope": {"kind": "workspace"},
                    "grants": [
                        {"kind": "api_read", "resource": "calendar", "origin": "owner", "ceiling": "workspace"},
                        {"kind": "network", "resource": "*", "origin": "workflow", "ceiling": "workspace"},
                    ],
                    "grantGeneration": 2,
                    "config": {"greeting": "hi", "nested": {"off": None}},
                    "attestation": "/v1/packages/hello/versions/1.1.0/attestation",
                },
                {
                    "installationId": "hello",
                    "instanceId": "inst-1",
                    "version": 3,
                    "package": "hello",
                    "release": "1.1.0",
                    "manifestDigest": MANIFEST_2,
                    "archive": {"sha256": ARCHIVE_2, "size": 99, "url": "https://get.example/inst-1"},
                    "manifestUrl": "https://get.example/manifest",
                    "scope": {"kind": "task", "id": "t-9"},
                    "grants": [],
                    "grantGeneration": 0,
                    "config": {},
                    "attestation": "/v1/packages/hello/versions/1.1.0/attestation",
                },
            ],
            "expiresAt": "1970-01-01T00:56:40Z",
            "nextCursor": None,
        },
        id="resolved",
    ),
    pytest.param(
        ResolvedView.of("ws-1", [], 3400),
        {"workspace": "ws-1", "items": [], "expiresAt": "1970-01-01T00:56:40Z", "nextCursor": None},
        id="empty",
    ),
]


@pytest.mark.parametrize(("view", "expected"), WORKSPACE_CASES)
def test_workspace_views_render_the_documented_json(view: ApiModel, expected: dict) -> None:
    assert dump(view) == expected


def test_an_installation_without_a_release_cannot_be_resolved() -> None:
    with pytest.raises(ValueError, match="no release"):
        resolved_item(REMOVED)


# ---- the models themselves ---------------------------------------------------------------------------------------

ALL_CASES = [*PUBLISHING_CASES, *WORKSPACE_CASES]


@pytest.mark.parametrize(("view", "expected"), ALL_CASES)
def test_a_rendered_body_validates_back_into_the_same_view(view: ApiModel, expected: dict) -> None:
    # the resolver re-validates a returned model's dump against the route's return annotation before sending it
    assert type(view).model_validate(dump(view)) == view


def test_keys_kept_as_null_are_kept_when_dumping_by_field_name_too() -> None:
    assert PackagePage.of([], None).model_dump() == {"items": [], "next_cursor": None}


def test_keep_null_must_name_a_field() -> None:
    with pytest.raises(TypeError, match="nextCursr"):

        class Typo(ApiModel):
            keep_null = frozenset({"nextCursr"})
            next_cursor: str | None = None


def test_views_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        PackageView.model_validate(
            {"package": "p", "latestVersion": "1.0.0", "versionCount": 1, "createdAt": "1970-01-01T00:00:01Z", "x": 1}
        )


def response_models() -> list[type[ApiModel]]:
    found = {
        value
        for module in (publishing_responses, workspace_responses, query_responses)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, ApiModel) and value is not ApiModel
    }
    return sorted(found, key=lambda model: model.__name__)


@pytest.mark.parametrize("model", response_models(), ids=lambda model: model.__name__)
def test_every_response_schema_is_typed_in_serialization_mode(model: type[ApiModel]) -> None:
    schema = model.model_json_schema(mode="serialization")

    assert schema["type"] == "object"
    assert schema["title"] == model.__name__
    assert schema["additionalProperties"] is False
    assert schema["properties"], f"{model.__name__} documents no properties"
    assert set(schema["properties"]) == {field.alias or name for name, field in model.model_fields.items()}
    for name, prop in schema["properties"].items():
        assert prop.keys() & {"type", "$ref", "anyOf", "enum", "const"}, f"{model.__name__}.{name} is untyped"


# ---- cold start: a handler imports the views it serves, not the others' ------------------------------------------


def test_a_grant_kind_is_a_manifest_permission_kind() -> None:
    from typing import get_args

    from packyard.installations.grants import PermissionKind as GrantKind
    from packyard.publishing.manifest import PermissionKind

    assert get_args(GrantKind) == get_args(PermissionKind)


def packyard_modules_imported_by(function: str) -> set[str]:
    """The ``packyard`` modules a fresh interpreter holds after importing ``functions/<function>/app.py``."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(root / 'shared')!r})\n"
        f"spec = importlib.util.spec_from_file_location('handler', {str(root / 'functions' / function / 'app.py')!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(' '.join(sorted(name for name in sys.modules if name.startswith('packyard'))))\n"
    )
    env = {"POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true", "PATH": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return set(done.stdout.split())


def test_admission_does_not_import_the_publish_side_views() -> None:
    """Issue 11: the workspace and consent views build on ``api.base``; admission answers with workspace views only,
    so importing it must not pull in the publish-side views, the manifest module or the usage/resolved domain."""
    imported = packyard_modules_imported_by("admission")

    assert "packyard.api.workspace_responses" in imported
    assert not imported & {
        "packyard.api.publishing_responses",
        "packyard.publishing.manifest",
        "packyard.workspaces.models",
        "packyard.workspaces.usage",
    }


def test_the_workspace_reads_do_not_import_the_publish_side() -> None:
    """Issue 11: the Queries function reads installations, operations, resolved and usage; the release models, the
    catalogue's store and the blob holds are imported only by the functions that read or hold a release."""
    imported = packyard_modules_imported_by("queries")

    assert {"packyard.store.workspace", "packyard.workspaces.usage", "packyard.store.counters"} <= imported
    assert not imported & {"packyard.publishing.models", "packyard.store.catalog", "packyard.store.reclaims"}
