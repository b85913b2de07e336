"""HTTP reads of the catalogue: packages, a package's releases, a release's manifest and publish receipt, and
short-lived download links of its archive."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Path

from packyard.api.principal import authorize
from packyard.api.publishing_responses import (
    ArchiveLinkView,
    PackagePage,
    PackageView,
    ReleaseManifestView,
    ReleasePage,
)
from packyard.api.resolver import build_resolver, serve
from packyard.api.routes import Cursor, PageSize, contract
from packyard.api.signing_responses import DsseEnvelopeView, SigningKeySetView
from packyard.authority import Permission
from packyard.errors import InvalidRequest, NotFound, ReleaseUnavailable, StoredItemInvalid
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.publishing import catalog, signing

app = build_resolver()

READ_ERRORS = (InvalidRequest, NotFound)


@app.get(
    "/v1/packages",
    operation_id="listPackages",
    summary="List the tenant's packages",
    description="One page of the tenant's packages; pass `nextCursor` as `cursor` for the next page.",
    tags=["releases"],
    **contract(Permission.READ_PACKAGES, {200: ("The tenant's packages", PackagePage)}, (InvalidRequest,)),
)
def list_packages(limit: PageSize = 50, cursor: Cursor = None) -> PackagePage:
    return PackagePage.of(*catalog.list_packages(authorize(app).tenant, limit, cursor))


@app.get(
    "/v1/packages/<package>",
    operation_id="getPackage",
    summary="Read a package",
    description="A package of the tenant: its highest published version and how many versions it ever had.",
    tags=["releases"],
    **contract(Permission.READ_PACKAGES, {200: ("A package", PackageView)}, READ_ERRORS),
)
def get_package(package: Annotated[str, Path()]) -> PackageView:
    return PackageView.of(catalog.get_package(authorize(app).tenant, package))


@app.get(
    "/v1/packages/<package>/versions",
    operation_id="listReleases",
    summary="List a package's releases",
    description="One page of the package's releases, newest first in semver order.",
    tags=["releases"],
    **contract(Permission.READ_PACKAGES, {200: ("The package's releases, newest first", ReleasePage)}, READ_ERRORS),
)
def list_versions(package: Annotated[str, Path()], limit: PageSize = 50, cursor: Cursor = None) -> ReleasePage:
    return ReleasePage.of(*catalog.list_versions(authorize(app).tenant, package, limit, cursor))


@app.get(
    "/v1/packages/<package>/versions/<version>",
    operation_id="getRelease",
    summary="Read a release with its manifest",
    description="The release's status, its publish receipt (the digests of the verified bytes) and its manifest.",
    tags=["releases"],
    **contract(
        Permission.READ_PACKAGES,
        {200: ("The release, its publish receipt and its manifest", ReleaseManifestView)},
        (*READ_ERRORS, StoredItemInvalid),
    ),
)
def get_version(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> ReleaseManifestView:
    return ReleaseManifestView.with_manifest(*catalog.get_version(authorize(app).tenant, package, version))


@app.get(
    "/v1/packages/<package>/versions/<version>/archive",
    operation_id="getReleaseArchive",
    summary="Get a download link of a release's archive",
    description=(
        "A short-lived (5 minutes) presigned URL of the verified archive, with its sha256 and size to check it against."
    ),
    tags=["releases"],
    **contract(
        Permission.READ_PACKAGES,
        {200: ("A short-lived download link of the archive", ArchiveLinkView)},
        (*READ_ERRORS, ReleaseUnavailable),
    ),
)
def get_archive(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> ArchiveLinkView:
    return ArchiveLinkView.of_link(catalog.archive_link(authorize(app).tenant, package, version))


@app.get(
    "/v1/packages/<package>/versions/<version>/attestation",
    operation_id="getReleaseAttestation",
    summary="Get the signed statement of a release",
    description=(
        "The release's DSSE envelope: an in-toto Statement v1 naming the archive and the manifest by sha256, with "
        "tenant, package, version, publisher and time, signed by a short-lived key whose certificate (the "
        "signature's extension) a key in GET /v1/signing-keys signed; releases signed before short-lived keys are "
        "signed by the listed key itself. Verify it offline (packyard verify); yanked and unavailable releases keep "
        "theirs."
    ),
    tags=["signing"],
    **contract(
        Permission.READ_PACKAGES,
        {200: ("The release's DSSE envelope", DsseEnvelopeView)},
        (*READ_ERRORS, ReleaseUnavailable, StoredItemInvalid),
    ),
)
def get_attestation(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> DsseEnvelopeView:
    return DsseEnvelopeView.of(signing.release_envelope(authorize(app).tenant, package, version))


@app.get(
    "/v1/signing-keys",
    operation_id="listSigningKeys",
    summary="List the public keys that sign releases",
    description=(
        "A JWK Set (RFC 7517) of every key that ever signed a release, the current one and the rotated-out ones, "
        "each with its kid (RFC 7638 thumbprint). Pin it (packyard keys pin) to verify releases offline."
    ),
    tags=["signing"],
    **contract(Permission.READ_PACKAGES, {200: ("The signing keys as a JWK Set", SigningKeySetView)}, ()),
)
def list_signing_keys() -> SigningKeySetView:
    authorize(app)
    return SigningKeySetView.of(signing.published_keys())


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
