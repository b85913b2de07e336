"""One file, verified (issue 22, item 1): ``GET …/versions/{v}/files/{path+}`` and ``GET …/installations/{id}/files/
{path+}`` answer one file of a release from its file pack (or a redirect to a large file's own object), checked
against the manifest's sha256; a path the release does not hold is the same 404 whatever the reason; stored bytes
that differ are 409 ``release_unavailable`` and mark the release as the scrub would."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from devstack.apigw import http_event
from devstack.caller import Caller
from packyard.authority import Permission
from packyard.publishing import file_pack, files
from packyard_cli.build import BuiltPackage, build_from_files

WS = "ws-files"
SITE = Path(os.__file__).parent / "site-packages"
VENV_SITE = Path(__file__).resolve().parents[2] / ".venv" / "lib"


def _real_tree(root: Path, under: str) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            found[f"{under}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return found


def _site_packages() -> Path:
    return next(VENV_SITE.glob("python3*/site-packages"))


@pytest.fixture(scope="module")
def real_files() -> dict[str, bytes]:
    """A package made of real directories: pydantic_core as installed (its compiled module is the largest file, over
    the inline limit), Mozilla's CA certificates as Debian ships them (a non-ASCII name) and the example skill."""
    tree = _real_tree(_site_packages() / "pydantic_core", "lib/pydantic_core")
    tree |= _real_tree(Path("/usr/share/ca-certificates/mozilla"), "share/ca-certificates/mozilla")
    tree |= _real_tree(Path(__file__).resolve().parents[2] / "examples" / "weather-skill" / "1.1.0", "skill")
    return tree


@pytest.fixture(autouse=True)
def _fresh_caches():
    files.forget_cached()
    yield
    files.forget_cached()


def _get_file(caller: Caller, path: str, raw_path: str | None = None) -> dict[str, Any]:
    """The route's raw answer (binary bodies arrive base64-encoded, as API Gateway passes them)."""
    event = http_event("GET", raw_path or path, claims=caller.claims)
    return caller.api.call(event)


def _body(answer: dict[str, Any]) -> bytes:
    body = answer.get("body") or ""
    return base64.b64decode(body) if answer.get("isBase64Encoded") else body.encode()


def _headers(answer: dict[str, Any]) -> dict[str, str]:
    return {k.lower(): v for k, v in (answer.get("headers") or {}).items()}


def _published(caller: Caller, package: str, version: str, built: BuiltPackage) -> None:
    final = caller.publish(package, version, built)
    assert final["state"] == "published", final


def _repr_digest(data: bytes) -> str:
    return f"sha-256=:{base64.b64encode(hashlib.sha256(data).digest()).decode()}:"


def _read(caller: Caller, prefix: str, path: str) -> bytes:
    answer = _get_file(caller, f"{prefix}/files/{path}")
    headers = _headers(answer)
    if answer["statusCode"] == 307:
        fetched = requests.get(headers["location"], timeout=30)
        assert fetched.status_code == 200
        data = fetched.content
    else:
        assert answer["statusCode"] == 200, answer
        data = _body(answer)
        assert headers["content-length"] == str(len(data))
    assert headers["repr-digest"] == _repr_digest(data)
    assert headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    return data


def test_the_deepest_a_non_ascii_and_the_largest_file_read_byte_identical(acme, real_files) -> None:
    # Given a package of real directories, published and installed
    built = build_from_files(real_files)
    _published(acme, "realpkg", "1.0.0", built)
    acme.wait_settled(WS, acme.install(WS, "real", "realpkg", "1.0.0", key="k-real"))
    paths = [entry["path"] for entry in built.manifest["files"]]
    deepest = max(paths, key=lambda p: p.count("/"))
    non_ascii = next(p for p in paths if not p.isascii())
    largest = max(built.manifest["files"], key=lambda e: e["size"])["path"]
    assert real_files[largest].__len__() > file_pack.INLINE_MAX_BYTES  # the redirect is exercised too

    for path in (deepest, non_ascii, largest):
        quoted = requests.utils.quote(path, safe="/")
        # When each is read through the release and through the installation
        by_release = _read(acme, "/v1/packages/realpkg/versions/1.0.0", quoted)
        by_installation = _read(acme, f"/v1/workspaces/{WS}/installations/real", quoted)
        # Then both are byte-identical to the file the manifest pins
        assert by_release == by_installation == real_files[path]
        assert hashlib.sha256(by_release).hexdigest() == next(
            e["sha256"] for e in built.manifest["files"] if e["path"] == path
        )


def test_a_large_file_is_a_redirect_to_exactly_its_bytes(acme) -> None:
    big = os.urandom(file_pack.INLINE_MAX_BYTES + 1)
    _published(acme, "bigpkg", "1.0.0", build_from_files({"data/big.bin": big, "README.md": b"hi\n"}))

    answer = _get_file(acme, "/v1/packages/bigpkg/versions/1.0.0/files/data/big.bin")

    assert answer["statusCode"] == 307
    headers = _headers(answer)
    assert headers["repr-digest"] == _repr_digest(big)
    assert headers["packyard-file-size"] == str(len(big))
    assert requests.get(headers["location"], timeout=30).content == big


def test_a_small_binary_file_is_answered_inline_byte_for_byte(acme) -> None:
    binary = bytes(range(256)) * 3 + b"\xff\xfe\x00 not UTF-8"
    _published(acme, "binpkg", "1.0.0", build_from_files({"icon.bin": binary}))

    answer = _get_file(acme, "/v1/packages/binpkg/versions/1.0.0/files/icon.bin")

    assert answer["statusCode"] == 200, answer
    assert answer["isBase64Encoded"] is True  # as API Gateway passes a binary body on
    assert _headers(answer)["content-type"] == "application/octet-stream"
    assert _body(answer) == binary


def _small_package(acme: Caller) -> BuiltPackage:
    built = build_from_files({"SKILL.md": b"# skill\n", "src/main.py": b"print('hi')\n", "src/util/x.py": b"x = 1\n"})
    _published(acme, "small", "1.0.0", built)
    return built


@pytest.mark.parametrize(
    "raw_path",
    [
        "/v1/packages/small/versions/1.0.0/files/nope.md",  # not in the release
        "/v1/packages/small/versions/1.0.0/files/src",  # a directory
        "/v1/packages/small/versions/1.0.0/files/src/",  # a directory, slash and all
        "/v1/packages/small/versions/1.0.0/files/src/../SKILL.md",  # '..'
        "/v1/packages/small/versions/1.0.0/files/src%2Fmain.py",  # an encoded slash
        "/v1/packages/small/versions/1.0.0/files/./SKILL.md",  # '.'
        "/v1/packages/small/versions/1.0.0/files//SKILL.md",  # an empty segment
        "/v1/packages/small/versions/9.9.9/files/SKILL.md",  # no such version
        "/v1/packages/nosuch/versions/1.0.0/files/SKILL.md",  # no such package
        f"/v1/workspaces/{WS}/installations/nosuch/files/SKILL.md",  # no such installation
    ],
)
def test_a_path_the_release_does_not_hold_is_the_same_404(acme, raw_path: str) -> None:
    _small_package(acme)

    answer = _get_file(acme, raw_path)

    assert answer["statusCode"] == 404, answer
    assert _body(answer).decode().count('"code": "not_found"') == 1
    assert files.NO_SUCH_FILE in _body(answer).decode()


def test_another_tenants_release_and_installation_are_the_same_404(acme, globex) -> None:
    _small_package(acme)
    acme.wait_settled(WS, acme.install(WS, "mine", "small", "1.0.0", key="k-mine"))
    assert _read(acme, "/v1/packages/small/versions/1.0.0", "SKILL.md") == b"# skill\n"

    for path in (
        "/v1/packages/small/versions/1.0.0/files/SKILL.md",
        f"/v1/workspaces/{WS}/installations/mine/files/SKILL.md",
    ):
        theirs = _get_file(globex, path)
        missing = _get_file(globex, path.replace("SKILL.md", "NOPE.md"))
        assert theirs["statusCode"] == missing["statusCode"] == 404
        assert _body(theirs) == _body(missing)


def test_the_file_routes_need_the_read_scopes(api, acme) -> None:
    _small_package(acme)
    acme.wait_settled(WS, acme.install(WS, "mine", "small", "1.0.0", key="k-scope"))
    no_packages = Caller(api, "t-acme", scopes=tuple(s for s in acme.scopes if s != Permission.READ_PACKAGES.value))
    no_workspaces = Caller(api, "t-acme", scopes=tuple(s for s in acme.scopes if s != Permission.READ_WORKSPACES.value))

    assert _get_file(no_packages, "/v1/packages/small/versions/1.0.0/files/SKILL.md")["statusCode"] == 403
    assert _get_file(no_workspaces, f"/v1/workspaces/{WS}/installations/mine/files/SKILL.md")["statusCode"] == 403


def _s3(stack) -> Any:
    return boto3.client("s3", region_name=stack.region)


def _release_item(stack, package: str, version: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#PACKAGE#{package}"}, "sk": {"S": f"VERSION#{version}"}},
    )["Item"]
    return item


def _installation_status(acme: Caller, name: str) -> str:
    return str(acme.get(f"/v1/workspaces/{WS}/installations/{name}").body["status"])


@pytest.mark.parametrize("damage", ["altered_pack", "missing_pack", "altered_large_file"])
def test_stored_bytes_that_differ_are_409_and_mark_the_release(acme, stack, damage: str) -> None:
    # Given a published, installed release
    big = os.urandom(file_pack.INLINE_MAX_BYTES + 10)
    built = build_from_files({"SKILL.md": b"# skill\n", "big.bin": big})
    _published(acme, "rot", "1.0.0", built)
    acme.wait_settled(WS, acme.install(WS, "rotting", "rot", "1.0.0", key="k-rot"))
    archive = built.archive_sha256
    pack = f"files/t-acme/{archive}/pack"
    stored = _s3(stack).get_object(Bucket=stack.bucket_name, Key=pack)["Body"].read()
    # When its stored bytes are damaged behind Packyard's back
    if damage == "altered_pack":
        _s3(stack).put_object(Bucket=stack.bucket_name, Key=pack, Body=b"!" + stored[1:])
        path = "SKILL.md"
    elif damage == "missing_pack":
        _s3(stack).delete_object(Bucket=stack.bucket_name, Key=pack)
        path = "SKILL.md"
    else:
        key = f"files/t-acme/{archive}/{hashlib.sha256(big).hexdigest()}"
        _s3(stack).put_object(Bucket=stack.bucket_name, Key=key, Body=b"x" + big[1:])
        path = "big.bin"
    answer = _get_file(acme, f"/v1/workspaces/{WS}/installations/rotting/files/{path}")

    # Then the read is refused, and the release and its installation are marked as the scrub marks them
    if damage == "missing_pack":
        # a release without a pack (published before packs) is read from the archive: still verified, still served
        assert answer["statusCode"] == 200
        assert _body(answer) == b"# skill\n"
        return
    assert answer["statusCode"] == 409, answer
    assert '"release_unavailable"' in _body(answer).decode()
    assert _release_item(stack, "rot", "1.0.0")["status"]["S"] == "unavailable"
    assert _installation_status(acme, "rotting") == "needs_attention"
    assert _get_file(acme, "/v1/packages/rot/versions/1.0.0/files/SKILL.md")["statusCode"] == 409


def test_a_reclaimed_archive_takes_its_file_pack_and_large_files_with_it(acme, stack, monkeypatch) -> None:
    from packyard import clock
    from tests.support.callers import all_keys
    from tests.support.sweeping import run_maintenance

    monkeypatch.setattr(file_pack, "INLINE_MAX_BYTES", 64)
    gone = build_from_files({"SKILL.md": b"gone\n", "large.bin": b"g" * 200})
    kept = build_from_files({"SKILL.md": b"kept\n", "large.bin": b"k" * 200})
    _published(acme, "gone", "1.0.0", gone)
    _published(acme, "kept", "1.0.0", kept)
    derived = {key.split("/")[2] for key in all_keys(stack, "files/t-acme/")}
    assert derived == {gone.archive_sha256, kept.archive_sha256}
    assert len(all_keys(stack, f"files/t-acme/{gone.archive_sha256}/")) == 2  # the pack and the large file

    # When the one release is yanked, nothing holds it, and the sweeps give its blobs back and reclaim them
    assert acme.delete("/v1/packages/gone/versions/1.0.0").status == 200
    run_maintenance(stack, clock.now() + 60)
    run_maintenance(stack, clock.now() + 120)

    # Then its pack and large file are gone with its archive, and the other release's stay and read
    assert {key.split("/")[2] for key in all_keys(stack, "files/t-acme/")} == {kept.archive_sha256}
    assert _read(acme, "/v1/packages/kept/versions/1.0.0", "large.bin") == b"k" * 200


def test_a_caller_holding_the_files_etag_gets_304_and_no_bytes_are_read(acme) -> None:
    from devstack.counting import count_aws_requests

    _small_package(acme)
    path = "/v1/packages/small/versions/1.0.0/files/SKILL.md"
    etag = _headers(_get_file(acme, path))["etag"]

    with count_aws_requests() as counted:
        held = acme.api.call(http_event("GET", path, claims=acme.claims, headers={"If-None-Match": f'W/"x", {etag}'}))
    stale = acme.api.call(http_event("GET", path, claims=acme.claims, headers={"If-None-Match": '"' + "0" * 64 + '"'}))

    assert held["statusCode"] == 304
    assert not held.get("body")
    assert _headers(held)["etag"] == etag
    assert counted[("s3", "GetObject")] == 0  # the manifest is kept; the pack is not read for a 304
    assert stale["statusCode"] == 200 and _body(stale) == b"# skill\n"


def test_a_small_archive_has_no_pack_and_its_files_are_read_from_the_archive_verified(acme, stack) -> None:
    # Given a small package (no file above the inline size, the archive under PACKED_ARCHIVE_MIN_BYTES)
    built = build_from_files({"SKILL.md": b"# tiny\n", "src/a.py": b"a = 1\n"})
    assert not file_pack.packs(len(built.archive), [7, 6])
    _published(acme, "tiny", "1.0.0", built)

    # Then the publish wrote no pack, and each file reads byte for byte from the archive
    from tests.support.callers import all_keys

    assert all_keys(stack, f"files/t-acme/{built.archive_sha256}/") == []
    assert _read(acme, "/v1/packages/tiny/versions/1.0.0", "src/a.py") == b"a = 1\n"

    # And bytes altered in the stored archive are still refused and mark the release, as the pack's are
    key = f"blobs/t-acme/sha256/{built.archive_sha256}"
    altered = build_from_files({"SKILL.md": b"# tinY\n", "src/a.py": b"a = 1\n"}).archive
    _s3(stack).put_object(Bucket=stack.bucket_name, Key=key, Body=altered)
    answer = _get_file(acme, "/v1/packages/tiny/versions/1.0.0/files/SKILL.md")

    assert answer["statusCode"] == 409, answer
    assert '"release_unavailable"' in _body(answer).decode()
    assert _release_item(stack, "tiny", "1.0.0")["status"]["S"] == "unavailable"
