"""Cold start: the time to import each handler vs a bare Powertools resolver handler, as a ratio in one run.

Each import runs in a fresh interpreter (median of 5); the figure is what Lambda's init phase pays before the first
invocation. docs/architecture.md target: every handler <= 1.3x the bare resolver.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
BARE = """
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
app = APIGatewayHttpResolver(enable_validation=True)

@app.get("/ping")
def ping() -> dict:
    return {}

def lambda_handler(event, context):
    return app.resolve(event, context)
"""
PROBE = """
import importlib.util, sys, time
sys.path.insert(0, {shared!r})
started = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(time.perf_counter() - started)
"""


def import_seconds(path: Path) -> float:
    samples = []
    for _ in range(RUNS):
        code = PROBE.format(shared=str(ROOT / "shared"), path=str(path))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        samples.append(float(out.stdout.strip()))
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        baseline = import_seconds(bare)
        table = Table(title=f"Handler import time vs a bare Powertools resolver (median of {RUNS}, fresh interpreters)")
        table.add_column("handler")
        table.add_column("ms", justify="right")
        table.add_column("ratio", justify="right")
        table.add_row("bare APIGatewayHttpResolver", f"{baseline * 1000:.0f}", "1.00")
        for handler in sorted((ROOT / "functions").glob("*/app.py")):
            seconds = import_seconds(handler)
            ratio = seconds / baseline
            style = "green" if ratio <= 1.3 else "red"
            table.add_row(handler.parent.name, f"{seconds * 1000:.0f}", f"[{style}]{ratio:.2f}[/]")
        Console().print(table)
        Console().print("target: <= 1.30 (docs/architecture.md)")


if __name__ == "__main__":
    main()
