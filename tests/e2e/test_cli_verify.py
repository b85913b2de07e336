"""``packyard keys pin`` and ``packyard verify`` as a subprocess against the local stack: a published release verifies
offline against the pinned keys, and the four refusals each exit with their own code and message."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from packyard.publishing import attestation
from tests.e2e.helpers import Cli, write_skill

pytestmark = pytest.mark.xdist_group("e2e")


@pytest.fixture
def published(cli: Cli, tmp_path: Path) -> dict[str, Path]:
    """A release (weather-skill@1.0.0), its archive pulled, its envelope saved and the keys pinned to a file."""
    folder = write_skill(tmp_path / "weather-skill")
    done = cli("publish", str(folder), "--package", "weather-skill", "--version", "1.0.0")
    assert done.code == 0, done.output
    archive = tmp_path / "weather.tar.gz"
    assert cli("pull", "weather-skill@1.0.0", "--out", str(archive)).code == 0
    keys = tmp_path / "keys.json"
    pinned = cli("--json", "keys", "pin", "--out", str(keys))
    assert pinned.code == 0, pinned.output
    assert len(pinned.json()["keys"]) >= 1
    envelope = tmp_path / "envelope.json"
    shown = cli("--json", "releases", "weather-skill@1.0.0")
    assert shown.json()["attestation"]["href"] == "/v1/packages/weather-skill/versions/1.0.0/attestation"
    return {"archive": archive, "keys": keys, "envelope": envelope, "folder": folder}


def _save_envelope(cli: Cli, target: Path) -> dict:  # type: ignore[type-arg]
    import requests

    answer = requests.get(
        f"{cli.stack.api}/v1/packages/weather-skill/versions/1.0.0/attestation",
        headers={"Authorization": f"Bearer {cli.token()}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    target.write_text(answer.text)
    document: dict = answer.json()  # type: ignore[type-arg]
    return document


def test_a_published_release_verifies_against_the_pinned_keys(cli: Cli, published: dict[str, Path]) -> None:
    online = cli("--json", "verify", "weather-skill@1.0.0", "--keys", str(published["keys"]))
    with_archive = cli(
        "verify", "weather-skill@1.0.0", "--keys", str(published["keys"]), "--archive", str(published["archive"])
    )
    _save_envelope(cli, published["envelope"])
    offline = cli(
        "--json",
        "verify",
        "weather-skill@1.0.0",
        "--keys",
        str(published["keys"]),
        "--envelope",
        str(published["envelope"]),
        "--archive",
        str(published["archive"]),
        "--endpoint",
        "http://127.0.0.1:9",  # nothing listens there: offline means no request
    )

    assert online.code == 0, online.output
    assert online.json()["verified"] is True
    assert online.json()["tenant"] == cli.tenant
    # signed by the publish process's short-lived key, which the pinned key certified for an hour
    signing_key = online.json()["signingKey"]
    assert signing_key["kid"] != online.json()["keyId"]
    assert online.json()["keyId"] in [key["kid"] for key in json.loads(published["keys"].read_text())["keys"]]
    assert signing_key["notBefore"] <= online.json()["publishedAt"] <= signing_key["notAfter"]
    assert with_archive.code == 0, with_archive.output
    assert "verified weather-skill@1.0.0" in with_archive.stdout
    assert offline.code == 0, offline.output
    assert offline.json()["archiveChecked"] is True


def test_a_tampered_envelope_exits_10(cli: Cli, published: dict[str, Path]) -> None:
    document = _save_envelope(cli, published["envelope"])
    statement = json.loads(base64.b64decode(document["payload"]))
    statement["predicate"]["publishedBy"] = "mallory"
    document["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    published["envelope"].write_text(json.dumps(document))
    truncated = published["envelope"].with_name("truncated.json")
    truncated.write_bytes(json.dumps(document).encode()[:-30])

    edited = cli(
        "verify", "weather-skill@1.0.0", "--keys", str(published["keys"]), "--envelope", str(published["envelope"])
    )
    cut = cli("verify", "weather-skill@1.0.0", "--keys", str(published["keys"]), "--envelope", str(truncated))

    assert edited.code == 10, edited.output
    assert "does not verify" in edited.output
    assert cut.code == 10, cut.output
    assert "damaged" in cut.output


def test_a_forged_certificate_exits_11(cli: Cli, published: dict[str, Path]) -> None:
    """The short-lived key's certificate given a later notAfter: KMS's signature over it no longer holds."""
    document = _save_envelope(cli, published["envelope"])
    certificate = document["signatures"][0]["extension"]["ext"]["certificate"]
    statement = json.loads(base64.b64decode(certificate["payload"]))
    statement["notAfter"] = "2099-01-01T00:00:00Z"
    certificate["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    published["envelope"].write_text(json.dumps(document))

    done = cli(
        "verify", "weather-skill@1.0.0", "--keys", str(published["keys"]), "--envelope", str(published["envelope"])
    )

    assert done.code == 11, done.output
    assert "forged or altered" in done.output


def test_a_wrong_key_exits_11(cli: Cli, published: dict[str, Path]) -> None:
    keys = json.loads(published["keys"].read_text())
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    jwk = attestation.public_jwk(
        other.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for entry in keys["keys"]:  # every pinned kid now names another key's point
        entry.update(x=jwk["x"], y=jwk["y"])
    published["keys"].write_text(json.dumps(keys))

    done = cli("verify", "weather-skill@1.0.0", "--keys", str(published["keys"]))

    assert done.code == 11, done.output
    assert "is another key" in done.output


def test_an_unknown_key_id_exits_12(cli: Cli, published: dict[str, Path]) -> None:
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    jwk = attestation.public_jwk(
        other.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    published["keys"].write_text(json.dumps({"keys": [jwk]}))

    done = cli("verify", "weather-skill@1.0.0", "--keys", str(published["keys"]))

    assert done.code == 12, done.output
    assert "does not hold" in done.output


def test_a_subject_mismatch_exits_13(cli: Cli, published: dict[str, Path]) -> None:
    other = published["archive"].with_name("other.tar.gz")
    other.write_bytes(published["archive"].read_bytes() + b"\0")
    _save_envelope(cli, published["envelope"])

    bytes_differ = cli("verify", "weather-skill@1.0.0", "--keys", str(published["keys"]), "--archive", str(other))
    other_release = cli(
        "verify", "weather-skill@2.0.0", "--keys", str(published["keys"]), "--envelope", str(published["envelope"])
    )

    assert bytes_differ.code == 13, bytes_differ.output
    assert "archive's sha256" in bytes_differ.output
    assert other_release.code == 13, other_release.output
    assert "version '1.0.0', not '2.0.0'" in other_release.output


def test_verify_without_pinned_keys_says_how_to_pin(cli: Cli, published: dict[str, Path], tmp_path: Path) -> None:
    done = cli("verify", "weather-skill@1.0.0", "--keys", str(tmp_path / "absent.json"))

    assert done.code == 2, done.output
    assert "packyard keys pin" in done.output


class ProfiledCli(Cli):
    """The CLI with its config file (and so its profile folder) in a test's own directory."""

    def __init__(self, cli: Cli, config: Path) -> None:
        super().__init__(cli.stack, cli.tenant, cli.endpoint)
        self.config = config

    def env(self) -> dict[str, str]:
        return {**super().env(), "PACKYARD_CONFIG_FILE": str(self.config)}


def test_keys_pin_keeps_the_set_beside_the_config_file_and_verify_reads_it(
    cli: Cli, published: dict[str, Path], tmp_path: Path
) -> None:
    profiled = ProfiledCli(cli, tmp_path / "config" / "config.toml")

    pinned = profiled("--json", "keys", "pin")
    verified = profiled("--json", "verify", "weather-skill@1.0.0", "--archive", str(published["archive"]))

    assert pinned.code == 0, pinned.output
    assert pinned.json()["path"] == str(tmp_path / "config" / "signing-keys" / "default.json")
    assert json.loads((tmp_path / "config" / "signing-keys" / "default.json").read_text())["keys"]
    assert verified.code == 0, verified.output
    assert verified.json()["keyId"] in pinned.json()["keys"]
