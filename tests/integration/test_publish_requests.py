"""The S3 requests one publish of new content makes (issue 23, item 5), through the real publish state machine: each
request and why it is there is listed in docs/decisions.md ("S3 requests of a publish"). Reads of what was just read
are gone: Publish takes the manifest Verify read (small manifests ride in its answer) and does not ask S3 whether a
new archive's blob or pack exist before writing them."""

from __future__ import annotations

from collections import Counter

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.counting import count_aws_requests
from packyard_cli.build import build_from_files
from tests.support import stacks

stack = stacks.stack
fresh_config = stacks.fresh_config


def test_a_publish_of_new_content_makes_these_s3_requests_and_no_more(stack: devstack.Stack) -> None:
    caller = Caller(LocalApi(stack), "t-requests")
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"# warm-up: the process's first publish\n"}))

    with count_aws_requests() as requests:
        final = caller.publish("hello", "1.1.0", build_from_files({"SKILL.md": b"# new content\n"}))

    assert final["state"] == "published"
    s3 = Counter({operation: n for (service, operation), n in requests.items() if service == "s3"})
    assert s3 == Counter(
        {
            "PutObject": 3,  # the staged manifest (create), the manifest blob, the file pack
            "CopyObject": 1,  # the verified archive, staging -> its blob (ETag-pinned, checksummed)
            "GetObject": 3,  # Verify: the staged manifest and archive; the pack's writer: the archive blob
            "HeadObject": 1,  # complete: was anything uploaded (409 upload_incomplete if not)
        }
    )
