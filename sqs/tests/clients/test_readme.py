"""README.md's SQS examples, as written: the boto3 flow is first_flow.py
itself, and each aws CLI line runs against the door (its endpoint swapped
for the test server's, `$RECEIPT` for the last receipt handle printed)."""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
ENDPOINT = os.environ["SLUICE_SQS_ENDPOINT"]


def block(marker):
    m = re.search(r"<!-- readme-test: " + marker + r" -->\n```\w+\n(.*?)```", README, re.S)
    assert m, f"README.md has no block marked {marker}"
    return m.group(1)


def test_the_readme_shows_first_flow_py_as_it_is():
    assert block("sqs-first-flow") == (pathlib.Path(__file__).parent / "first_flow.py").read_text()


def test_the_readme_aws_cli_lines_run():
    # A command starts with `aws`; the lines after it until the next belong
    # to it (a backslash continues, and a quoted JSON value may span lines).
    lines = []
    for l in block("awscli").replace("\\\n", " ").splitlines():
        if l.startswith("aws "):
            lines.append(l)
        elif l.strip():
            lines[-1] += "\n" + l
    assert len(lines) >= 10, lines
    exe = shutil.which("aws") or str(pathlib.Path(sys.executable).parent / "aws")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_PAGER="")
    receipt = None
    counts = []
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "aws", line
        words = [w.replace("http://127.0.0.1:9324", ENDPOINT) for w in words]
        if "$RECEIPT" in words:
            assert receipt, f"no receipt printed before: {line}"
            words = [receipt if w == "$RECEIPT" else w for w in words]
        out = subprocess.run([exe, *words[1:], "--output", "json"], capture_output=True,
                             text=True, timeout=60, env=env)
        assert out.returncode == 0, f"{line}\n{out.stderr}"
        if out.stdout.strip():
            reply = json.loads(out.stdout)
            for m in reply.get("Messages", []):
                receipt = m["ReceiptHandle"]
                counts.append(m.get("Attributes", {}).get("ApproximateReceiveCount"))
    assert counts[-1] == "1", counts
