"""Signed releases on the command line: ``keys pin`` (the service's public keys, kept in the profile's folder) and
``verify`` (a release's DSSE envelope and bytes, checked offline against the pinned keys: packyard_cli.attestations).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from packyard.publishing import attestation
from packyard_cli import attestations
from packyard_cli.arguments import exact_release
from packyard_cli.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError, segment
from packyard_cli.commands.context import Context
from packyard_cli.output import Column, dig
from packyard_cli.profiles import config_path

SIGNING_KEYS_PATH = "/v1/signing-keys"


def pinned_keys_path(profile: str) -> Path:
    """Where ``keys pin`` keeps a profile's key set: beside the config file, one file per profile."""
    return config_path().parent / "signing-keys" / f"{profile}.json"


def cmd_keys(ctx: Context, args: argparse.Namespace) -> int:
    """``keys pin``: the one action today."""
    return cmd_keys_pin(ctx, args)


def cmd_keys_pin(ctx: Context, args: argparse.Namespace) -> int:
    """Fetch ``GET /v1/signing-keys`` and keep it as the profile's pinned key set (replacing an older pin)."""
    body = ctx.client.request("GET", SIGNING_KEYS_PATH).body or {}
    raw = json.dumps(body, sort_keys=True, indent=2).encode() + b"\n"
    try:
        keys = attestations.load_key_set(raw)
    except attestations.KeySetInvalid as invalid:
        raise CliError("the service's signing keys are not a JWK Set", detail=str(invalid)) from invalid
    target = Path(args.out) if args.out else pinned_keys_path(ctx.profile.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.partial")
    scratch.write_bytes(raw)
    os.replace(scratch, target)
    summary = {"path": str(target), "keys": keys.kids()}

    def render() -> None:
        ctx.out.print(f"[bold green]pinned[/] {len(keys.keys)} signing key(s) → [bold]{target}[/]", highlight=False)
        for kid in keys.kids():
            ctx.out.print(f"  {kid}", highlight=False)

    ctx.show(summary, render=render, columns=(Column("path", dig("path"), key=True), Column("keys", dig("keys"))))
    return EXIT_OK


def _key_set(ctx: Context, args: argparse.Namespace) -> attestations.KeySet:
    path = Path(args.keys) if args.keys else pinned_keys_path(ctx.profile.name)
    if not path.is_file():
        raise CliError(
            f"no pinned signing keys at {path}",
            detail="pin the service's keys first (packyard keys pin), or pass --keys FILE (a JWK Set)",
            exit_code=EXIT_USAGE,
        )
    try:
        return attestations.load_key_set(path.read_bytes())
    except attestations.KeySetInvalid as invalid:
        raise CliError(f"{path} is not a JWK Set", detail=str(invalid), exit_code=EXIT_USAGE) from invalid


def _release_path(package: str, version: str) -> str:
    return f"/v1/packages/{segment(package)}/versions/{segment(version)}"


def cmd_verify(ctx: Context, args: argparse.Namespace) -> int:
    """Verify a release's signed statement offline against the pinned keys, and the bytes against its subjects:
    the archive given (``--archive``), else the digests the service's release record names. With ``--envelope``
    (and ``--archive``) nothing is asked of the service at all."""
    keys = _key_set(ctx, args)
    package, version = args.release
    record: dict[str, Any] = {}
    if args.envelope:
        raw = Path(args.envelope).read_bytes()
    else:
        record = ctx.client.request("GET", _release_path(package, version)).body or {}
        link = (record.get("attestation") or {}).get("href")
        if not link:
            raise CliError(
                f"{package}@{version} has no signed statement (published before releases were signed)",
                code="unsigned_release",
                exit_code=EXIT_REFUSED,
            )
        raw = json.dumps(ctx.client.request("GET", str(link)).body).encode()
    try:
        verified = attestations.verify_envelope(raw, keys, package=package, version=version)
        archive = attestations.sha256_file(Path(args.archive)) if args.archive else None
        if archive is None and record:
            archive = (record.get("archive") or {}).get("sha256")
        attestations.check_subjects(
            verified, archive_sha256=archive, manifest_sha256=record.get("manifestDigest") if record else None
        )
    except attestations.VerificationRefused as refused:
        raise CliError(
            f"{package}@{version}: {refused.reason}", code=refused.code, exit_code=refused.exit_code
        ) from refused
    claim = verified.claim
    summary = {
        "package": claim.package,
        "version": claim.version,
        "tenant": claim.tenant,
        "verified": True,
        "keyId": verified.kid,
        "archiveSha256": claim.archive_sha256,
        "manifestSha256": claim.manifest_sha256,
        "archiveChecked": bool(args.archive),
        "publishedBy": claim.published_by,
        "publishedAt": claim.published_at,
    }
    certificate = verified.certificate
    if certificate is not None:  # signed by a short-lived key that the pinned key certified
        summary["signingKey"] = {
            "kid": certificate.kid,
            "notBefore": attestation.statement_time(certificate.not_before),
            "notAfter": attestation.statement_time(certificate.not_after),
            "issuer": certificate.issuer,
        }
    signer = f"key {verified.kid}" if certificate is None else f"key {certificate.kid}, certified by key {verified.kid}"

    def render() -> None:
        checked = f"archive {args.archive}" if args.archive else "the release's recorded digests"
        ctx.out.print(
            f"[bold green]verified[/] {claim.package}@{claim.version}: signed by {signer}; {checked} "
            f"match the signed statement (published by {claim.published_by} at {claim.published_at})",
            highlight=False,
            soft_wrap=True,
        )

    columns = (
        Column("release", lambda d: f"{d['package']}@{d['version']}", key=True),
        Column("key", dig("keyId")),
        Column("archive", dig("archiveSha256")),
    )
    ctx.show(summary, render=render, columns=columns)
    return EXIT_OK


def add_signing_commands(command: Any) -> None:
    """``keys pin`` and ``verify`` (called by packyard_cli.parser with its command factory)."""
    keys = command("keys", "pin the service's public signing keys (GET /v1/signing-keys) for offline verify", cmd_keys)
    keys.add_argument("action", choices=("pin",), help="pin: fetch the keys and keep them as this profile's key set")
    keys.add_argument("--out", help="write the JWK Set here instead (default: beside the config file, per profile)")

    verify = command(
        "verify",
        "verify a release's signature and bytes offline against the pinned keys (exit 10 tampered envelope, "
        "11 wrong key, 12 unknown key id, 13 subject mismatch)",
        cmd_verify,
    )
    verify.add_argument("release", type=exact_release, metavar="PACKAGE@VERSION")
    verify.add_argument("--archive", help="the archive file to check against the signed statement")
    verify.add_argument("--keys", help="a JWK Set file to verify against (default: the profile's pinned keys)")
    verify.add_argument("--envelope", help="the DSSE envelope file (with --archive: nothing is asked of the service)")
