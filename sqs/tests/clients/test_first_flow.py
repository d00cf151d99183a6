"""The README's first flow, run as written (first_flow.py)."""

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent


def test_the_first_flow_runs_as_the_readme_shows_it():
    out = subprocess.run(
        [sys.executable, str(HERE / "first_flow.py")],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "received again, ApproximateReceiveCount = 2" in lines, out.stdout
    assert "in the dead-letter queue: order 9" in lines or any(
        l.startswith("in the dead-letter queue: order ") for l in lines), out.stdout
    assert lines[-1] == "done", out.stdout
    print(out.stdout)
