"""The S3 requests one publish of new content makes (issue 23, item 5), through the real publish state machine: each
request and why it is there is listed in docs/decisions.md ("S3 requests of a publish"). Reads of what was just read
are gone: Publish takes the manifest Verify read (small manifests ride in its answer) and does not ask S3 whether a
new archive's blob or pack exist before writing them; a small archive gets no pack (``file_pack.packs``)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.counting import count_aws_requests
from packyard.publishing import file_pack
from packyard_cli.build import build_from_files
from tests.support import stacks

stack = stacks.stack
fresh_config = stacks.fresh_config


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_publish_of_new_content_makes_these_s3_requests_and_no_more(stack: devstack.Stack, size: str) -> None:
    caller = Caller(LocalApi(stack), "t-requests")
    caller.publish(
        f"hello-{size}", "1.0.0", build_from_files({"SKILL.md": b"# warm-up: the process's first publish\n"})
    )
    files = {"SKILL.md": b"# new content\n"}
    if size == "large":  # an archive above the size below which no file pack is written
        files["data.bin"] = os.urandom(file_pack.PACKED_ARCHIVE_MIN_BYTES + 1)

    with count_aws_requests() as requests:
        final = caller.publish(f"hello-{size}", "1.1.0", build_from_files(files))

    assert final["state"] == "published"
    s3 = Counter({operation: n for (service, operation), n in requests.items() if service == "s3"})
    packed = size == "large"
    assert s3 == Counter(
        {
            # the staged manifest (create), the manifest blob, the file pack (a large archive's only)
            "PutObject": 3 if packed else 2,
            "CopyObject": 1,  # the verified archive, staging -> its blob (ETag-pinned, checksummed)
            # Verify: the staged manifest and archive; the pack's writer: the archive blob (a large archive's only)
            "GetObject": 3 if packed else 2,
            "HeadObject": 1,  # complete: was anything uploaded (409 upload_incomplete if not)
        }
    )
