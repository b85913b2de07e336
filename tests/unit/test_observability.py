"""The Tracer: active with X-Ray on Lambda (botocore instrumented, subsegments sent), and, where tracing is off,
running without importing the X-Ray SDK at all. Each case runs in a fresh interpreter, since both depend on the
environment at import and X-Ray's recorder is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ON_LAMBDA = {
    "AWS_LAMBDA_FUNCTION_NAME": "probe",
    "LAMBDA_TASK_ROOT": str(ROOT / "functions" / "queries"),
    "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    "AWS_DEFAULT_REGION": "us-east-1",
}

ACTIVE = """
import json, sys
from aws_xray_sdk.core import patcher, xray_recorder
from packyard.observability import tracer

sent = []

class Emitter:
    def send_entity(self, entity):
        sent.append(entity.name)
    def set_daemon_address(self, address):
        pass

xray_recorder.configure(emitter=Emitter())

@tracer.capture_method(capture_response=False)
def work():
    return 42

assert work() == 42
print(json.dumps({"disabled": tracer.disabled, "provider": type(tracer.provider).__module__,
                  "patched": sorted(patcher._PATCHED_MODULES), "sent": sent}))
"""

OFF = """
import json, sys
from packyard.observability import tracer

@tracer.capture_method(capture_response=False)
def work():
    return 42

assert work() == 42
print(json.dumps({"disabled": tracer.disabled, "provider": type(tracer.provider).__name__,
                  "xray_core_imported": "aws_xray_sdk.core" in sys.modules}))
"""


def run(code: str, env: dict[str, str]) -> dict[str, object]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "AWS_", "LAMBDA_", "_X_AMZN"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "PYTHONPATH": str(ROOT / "shared"), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_on_lambda_the_tracer_is_x_ray_instrumenting_botocore_and_sending_subsegments() -> None:
    # Given the environment Lambda gives a function with active tracing
    # When the tracer traces a method
    report = run(ACTIVE, ON_LAMBDA)
    # Then it is enabled, on X-Ray's recorder, with botocore (only) instrumented, and the subsegment was sent
    assert report["disabled"] is False
    assert str(report["provider"]).startswith("aws_xray_sdk")
    assert report["patched"] == ["botocore"]
    assert "## __main__.work" in report["sent"]  # type: ignore[operator]


def test_off_lambda_the_tracer_runs_without_the_x_ray_sdk() -> None:
    # Given no Lambda environment (tests, the local stack)
    report = run(OFF, {})
    # Then tracing is off, decorated code still runs, and X-Ray's recorder was never imported
    assert report == {"disabled": True, "provider": "NoTracing", "xray_core_imported": False}


def test_tracing_can_be_switched_off_on_lambda() -> None:
    report = run(OFF, {**ON_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "true"})
    assert report == {"disabled": True, "provider": "NoTracing", "xray_core_imported": False}
