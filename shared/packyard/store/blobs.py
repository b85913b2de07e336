"""S3: staging objects of upload sessions and content-addressed blobs, written with checksums.

uploads/<tenant>/<uploadId>/<token>/archive.tar.gz   staging (the bucket's lifecycle rule expires these)
uploads/<tenant>/<uploadId>/<token>/manifest.json
blobs/<tenant>/sha256/<hex>                          content-addressed, shared by identical content
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any, BinaryIO

from packyard.config import required
from packyard.errors import ArchiveRejectCode, ArchiveRejected
from packyard.store.aws import client, error_code, translate

STREAM_CHUNK = 1024 * 1024


def bucket() -> str:
    return required("bucket_name").bucket_name


def staging_prefix(tenant: str, upload_id: str, token: str) -> str:
    return f"uploads/{tenant}/{upload_id}/{token}/"


def staged_archive_key(tenant: str, upload_id: str, token: str) -> str:
    return staging_prefix(tenant, upload_id, token) + "archive.tar.gz"


def staged_manifest_key(tenant: str, upload_id: str, token: str) -> str:
    return staging_prefix(tenant, upload_id, token) + "manifest.json"


def blob_key(tenant: str, sha256: str) -> str:
    return f"blobs/{tenant}/sha256/{sha256}"


def _b64(sha256_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def _s3() -> Any:
    return client("s3")


def _translate(exc: Exception) -> Exception:
    return translate(exc, "S3")


def put_bytes(key: str, data: bytes, sha256_hex: str, *, if_absent: bool = False) -> bool:
    """PUT with a SHA-256 checksum S3 checks on receipt. With ``if_absent``, returns False if the key existed."""
    params: dict[str, Any] = {
        "Bucket": bucket(),
        "Key": key,
        "Body": data,
        "ChecksumSHA256": _b64(sha256_hex),
        "ContentType": "application/json",
    }
    if if_absent:
        params["IfNoneMatch"] = "*"
    try:
        _s3().put_object(**params)
    except Exception as exc:
        if if_absent and error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise _translate(exc) from exc
    return True


def read_bytes(key: str, *, at_most: int | None = None) -> bytes | None:
    """The object's bytes, or None when it does not exist. With ``at_most``, no more than ``at_most + 1`` bytes are
    read (a longer answer says the object is longer than expected, without holding all of it)."""
    try:
        body = _s3().get_object(Bucket=bucket(), Key=key)["Body"]
        try:
            data: bytes = body.read() if at_most is None else body.read(at_most + 1)
        finally:
            body.close()
        return data
    except Exception as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise _translate(exc) from exc


@dataclass
class OpenedObject:
    stream: BinaryIO
    etag: str
    size: int


def open_stream(key: str) -> OpenedObject | None:
    """A streaming GET; the caller reads it once. None when the object does not exist."""
    try:
        response = _s3().get_object(Bucket=bucket(), Key=key)
    except Exception as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise _translate(exc) from exc
    return OpenedObject(stream=response["Body"], etag=response["ETag"], size=int(response["ContentLength"]))


def sha256_of(key: str, *, stop_after: int) -> tuple[str, int] | None:
    """Stream the object through sha256 (1 MiB chunks, one pass): its hex digest and length, or None when it does
    not exist. Stops reading once more than ``stop_after`` bytes came (the length then says it is too long)."""
    opened = open_stream(key)
    if opened is None:
        return None
    digest = hashlib.sha256()
    read = 0
    try:
        while chunk := opened.stream.read(STREAM_CHUNK):
            digest.update(chunk)
            read += len(chunk)
            if read > stop_after:
                break
    except Exception as exc:
        raise _translate(exc) from exc
    finally:
        opened.stream.close()
    return digest.hexdigest(), read


def head(key: str) -> dict[str, Any] | None:
    try:
        return dict(_s3().head_object(Bucket=bucket(), Key=key, ChecksumMode="ENABLED"))
    except Exception as exc:
        if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
            return None
        raise _translate(exc) from exc


def copy_verified(source_key: str, source_etag: str, target_key: str, sha256_hex: str) -> None:
    """Server-side copy of exactly the bytes the verifier read (pinned by ETag), asking S3 for a SHA-256
    checksum of the copy. Bytes that changed since they were verified (another ETag, or a copy whose checksum
    differs from the verified digest) are refused at once (``digest_mismatch``): retrying would not change them."""
    try:
        response = _s3().copy_object(
            Bucket=bucket(),
            Key=target_key,
            CopySource={"Bucket": bucket(), "Key": source_key},
            CopySourceIfMatch=source_etag,
            ChecksumAlgorithm="SHA256",
            MetadataDirective="REPLACE",
            ContentType="application/gzip",
        )
    except Exception as exc:
        if error_code(exc) in ("PreconditionFailed", "412"):
            raise ArchiveRejected(
                ArchiveRejectCode.DIGEST_MISMATCH, "the stored archive changed after it was verified"
            ) from exc
        raise _translate(exc) from exc
    checksum = response.get("CopyObjectResult", {}).get("ChecksumSHA256")
    if checksum and checksum.split("-")[0] != _b64(sha256_hex):
        delete(target_key)
        raise ArchiveRejected(
            ArchiveRejectCode.DIGEST_MISMATCH, "the stored archive's checksum differs from the verified digest"
        )


def delete(key: str) -> None:
    try:
        _s3().delete_object(Bucket=bucket(), Key=key)
    except Exception as exc:
        raise _translate(exc) from exc


def delete_prefix_objects(keys: list[str]) -> None:
    """Delete these keys in one request (a key already gone succeeds)."""
    if not keys:
        return
    try:
        _s3().delete_objects(Bucket=bucket(), Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    except Exception as exc:
        raise _translate(exc) from exc


def presigned_put(key: str, expires_in: int) -> str:
    try:
        return str(
            _s3().generate_presigned_url(
                "put_object", Params={"Bucket": bucket(), "Key": key}, ExpiresIn=expires_in, HttpMethod="PUT"
            )
        )
    except Exception as exc:
        raise _translate(exc) from exc


def presigned_get(key: str, expires_in: int, filename: str | None = None) -> str:
    params: dict[str, Any] = {"Bucket": bucket(), "Key": key}
    if filename:
        params["ResponseContentDisposition"] = f'attachment; filename="{filename}"'
    try:
        return str(_s3().generate_presigned_url("get_object", Params=params, ExpiresIn=expires_in))
    except Exception as exc:
        raise _translate(exc) from exc
