"""hold_changes: which releases an installation starts and stops holding (keeping them from reclamation) when a plan
replaces its baseline. A live installation holds its active release (a strict hold: the release must still have
its blobs) and its previous one; a removed installation holds none."""

from __future__ import annotations

import pytest

from packyard.installations.models import Creation, Installation, InstallationStatus, ReleaseRef
from packyard.installations.scopes import Scope
from packyard.operations.commit import hold_changes

NOW = 1_700_000_000
ACTIVE, ARCHIVED, REMOVED = InstallationStatus.ACTIVE, InstallationStatus.ARCHIVED, InstallationStatus.REMOVED


def ref(version: str) -> ReleaseRef:
    return ReleaseRef(
        package="hello", version=version, manifest_digest="m" * 64, archive_sha256="a" * 64, archive_size=10
    )


V1, V2, V3 = ref("1.0.0"), ref("2.0.0"), ref("3.0.0")


def row(
    release: ReleaseRef | None, previous: ReleaseRef | None = None, status: InstallationStatus = ACTIVE
) -> Installation:
    return Installation(
        tenant="t-acme",
        workspace="ws-1",
        installation_id="hello",
        instance_id="inst-1",
        version=1,
        status=status,
        creation=Creation.FRESH,
        package="hello",
        release=release,
        previous=previous,
        scope=Scope(),
        last_operation_id="op-1",
        updated_at=NOW,
    )


@pytest.mark.parametrize(
    ("baseline", "plan", "holds", "let_go"),
    [
        pytest.param(None, row(V1), [("hello", "1.0.0", True)], [], id="install: holds its release, strictly"),
        pytest.param(row(V1), row(V2, V1), [("hello", "2.0.0", True)], [], id="update: the old one stays as previous"),
        pytest.param(
            row(V2, V1), row(V3, V2), [("hello", "3.0.0", True)], [("hello", "1.0.0")], id="update: oldest let go"
        ),
        pytest.param(row(V2, V1), row(V1, V2), [], [], id="rollback: both kept, nothing moves"),
        pytest.param(row(V2, V1), row(V2, V1), [], [], id="repair: nothing moves"),
        pytest.param(row(V2, V1), row(V2, V1, ARCHIVED), [], [], id="archive: an archived one still holds"),
        pytest.param(
            row(V2, V1), row(None, V2, REMOVED), [], [("hello", "1.0.0"), ("hello", "2.0.0")], id="uninstall: none"
        ),
        pytest.param(
            row(None, V2, REMOVED),
            row(V3, V2),
            [("hello", "2.0.0", False), ("hello", "3.0.0", True)],
            [],
            id="reinstall over a removed row: its retained previous is held again, not strictly",
        ),
        pytest.param(row(V2, V2), row(V3, V2), [("hello", "3.0.0", True)], [], id="one release in both slots"),
    ],
)
def test_hold_changes(
    baseline: Installation | None,
    plan: Installation,
    holds: list[tuple[str, str, bool]],
    let_go: list[tuple[str, str]],
) -> None:
    changes = hold_changes(baseline, plan)

    assert sorted(changes["holds"]) == sorted(holds)
    assert sorted(changes["let_go"]) == sorted(let_go)
