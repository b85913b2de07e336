"""S3: the file pack of a release's archive and its large files, read one file at a time.

files/<tenant>/<archiveSha256>/pack            the archive's small files back to back, then their index
files/<tenant>/<archiveSha256>/<fileSha256>    one large file, as its own object (a presigned URL serves exactly it)

Both are derived from the archive (the source of truth) when the archive blob is written, and deleted with it.
The pack is written with one PUT when it is small, else as a multipart upload of ``PART_BYTES`` parts (completed
only once every part is in: an interrupted write leaves no object, and the bucket's lifecycle rule aborts the
upload); a large file is one PUT carrying the manifest's sha256 as its checksum, which S3 keeps and answers on HEAD.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any
from urllib.parse import quote

from packyard.store.aws import client, error_code, translate
from packyard.store.blobs import bucket

PART_BYTES = 8 * 1024 * 1024
"""Multipart part size of a large pack (S3's minimum part is 5 MiB)."""

_MISSING = ("NoSuchKey", "404", "NotFound")


def pack_key(tenant: str, archive_sha256: str) -> str:
    return f"files/{tenant}/{archive_sha256}/pack"


def file_object_key(tenant: str, archive_sha256: str, file_sha256: str) -> str:
    return f"files/{tenant}/{archive_sha256}/{file_sha256}"


def _s3() -> Any:
    return client("s3")


def _translate(exc: Exception) -> Exception:
    return translate(exc, "S3")


def _b64(sha256_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


class PackWriter:
    """Appends bytes to a pack object: buffered into one PUT while the pack is small, a multipart upload once it
    passes ``PART_BYTES``. Nothing is visible until ``finish``: a multipart upload interrupted before it is left to
    the bucket's ``AbortIncompleteMultipartUploads`` lifecycle rule (a day), and a retry starts a new one."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        self._buffer += data
        self.size += len(data)
        while len(self._buffer) >= PART_BYTES:
            self._send_part(bytes(self._buffer[:PART_BYTES]))
            del self._buffer[:PART_BYTES]

    def _send_part(self, part: bytes) -> None:
        try:
            if self._upload_id is None:
                started = _s3().create_multipart_upload(
                    Bucket=bucket(), Key=self.key, ContentType="application/octet-stream"
                )
                self._upload_id = str(started["UploadId"])
            number = len(self._parts) + 1
            sent = _s3().upload_part(
                Bucket=bucket(), Key=self.key, UploadId=self._upload_id, PartNumber=number, Body=part
            )
        except Exception as exc:
            raise _translate(exc) from exc
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    def finish(self) -> None:
        try:
            if self._upload_id is None:
                _s3().put_object(
                    Bucket=bucket(), Key=self.key, Body=bytes(self._buffer), ContentType="application/octet-stream"
                )
                return
            if self._buffer:
                self._send_part(bytes(self._buffer))
                self._buffer.clear()
            _s3().complete_multipart_upload(
                Bucket=bucket(), Key=self.key, UploadId=self._upload_id, MultipartUpload={"Parts": self._parts}
            )
        except Exception as exc:
            raise _translate(exc) from exc


@contextmanager
def reading_objects() -> Iterator[None]:
    """Around the reading of an opened object's stream (``blobs.open_stream``): a broken or timed-out read is a
    ``TransientStoreError`` (retried), never a botocore error a state machine's Catch would take for a refusal."""
    try:
        yield
    except Exception as exc:
        translated = _translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def put_file_object(key: str, body: IO[bytes], size: int, sha256_hex: str) -> None:
    """One PUT of a large file with its sha256 as the checksum S3 checks on receipt and keeps."""
    try:
        _s3().put_object(
            Bucket=bucket(),
            Key=key,
            Body=body,
            ContentLength=size,
            ChecksumSHA256=_b64(sha256_hex),
            ContentType="application/octet-stream",
        )
    except Exception as exc:
        raise _translate(exc) from exc


def exists(key: str) -> bool:
    try:
        _s3().head_object(Bucket=bucket(), Key=key)
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return False
        raise _translate(exc) from exc
    return True


def _ranged_get(key: str, byte_range: str, *, past_the_end: bytes | None = None) -> tuple[bytes, str] | None:
    """One ranged GET: the bytes and the answer's ``Content-Range`` ("" when it has none); None when the object does
    not exist. A range S3 cannot satisfy (``InvalidRange``) reads as ``past_the_end`` when given, else it fails."""
    try:
        response = _s3().get_object(Bucket=bucket(), Key=key, Range=byte_range)
        body = response["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return None
        if past_the_end is not None and error_code(exc) == "InvalidRange":
            return past_the_end, ""
        raise _translate(exc) from exc
    return data, str(response.get("ContentRange") or "")


def read_range(key: str, first: int, last: int) -> bytes | None:
    """Bytes ``first``..``last`` (inclusive) of the object, or None when it does not exist. One ranged GET."""
    found = _ranged_get(key, f"bytes={first}-{last}", past_the_end=b"")
    return None if found is None else found[0]


def read_tail(key: str, length: int) -> tuple[bytes, int] | None:
    """The last ``length`` bytes of the object (all of it when shorter) and the object's size; None when missing.
    One ranged GET (a suffix range)."""
    found = _ranged_get(key, f"bytes=-{length}")
    if found is None:
        return None
    data, content_range = found
    size = int(content_range.rpartition("/")[2]) if "/" in content_range else len(data)
    return data, size


def stored_checksum(key: str) -> tuple[str | None, int] | None:
    """The object's stored SHA-256 checksum (hex, None when it has none) and its size; None when it is missing."""
    try:
        head = _s3().head_object(Bucket=bucket(), Key=key, ChecksumMode="ENABLED")
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return None
        raise _translate(exc) from exc
    checksum = head.get("ChecksumSHA256")
    hex_digest = None
    if checksum and "-" not in str(checksum):  # a multipart (composite) checksum is not the object's sha256
        hex_digest = base64.b64decode(str(checksum)).hex()
    return hex_digest, int(head["ContentLength"])


def presigned_get(key: str, expires_in: int, filename: str) -> str:
    # RFC 6266 / 8187: the file's own name, percent-encoded UTF-8 (a package path may hold any character)
    disposition = f"attachment; filename*=UTF-8''{quote(filename, safe='')}"
    params = {"Bucket": bucket(), "Key": key, "ResponseContentDisposition": disposition}
    try:
        return str(_s3().generate_presigned_url("get_object", Params=params, ExpiresIn=expires_in))
    except Exception as exc:
        raise _translate(exc) from exc
