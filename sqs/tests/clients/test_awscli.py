"""The aws CLI's sqs commands against the door, as the README shows them."""

import json
import os
import shutil
import subprocess
import sys
import pathlib

ENDPOINT = os.environ["SLUICE_SQS_ENDPOINT"]


def aws(*args):
    # The aws CLI beside this Python (the run's pinned one), else on PATH.
    beside = pathlib.Path(sys.executable).parent / "aws"
    exe = str(beside) if beside.exists() else shutil.which("aws")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_PAGER="")
    out = subprocess.run([exe, "--endpoint-url", ENDPOINT, "sqs", *args, "--output", "json"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_the_aws_cli_creates_sends_receives_and_deletes(name):
    url = aws("create-queue", "--queue-name", name)["QueueUrl"]
    assert url in aws("list-queues", "--queue-name-prefix", name)["QueueUrls"]
    sent = aws("send-message", "--queue-url", url, "--message-body", "from the cli")
    assert "MessageId" in sent
    got = aws("receive-message", "--queue-url", url, "--wait-time-seconds", "2")["Messages"][0]
    assert got["Body"] == "from the cli"
    aws("delete-message", "--queue-url", url, "--receipt-handle", got["ReceiptHandle"])
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    aws("delete-queue", "--queue-url", url)


def test_the_aws_cli_batches_purges_tags_and_changes_visibility(name):
    url = aws("create-queue", "--queue-name", name, "--attributes", "VisibilityTimeout=30",
              "--tags", "team=payments")["QueueUrl"]
    assert aws("list-queue-tags", "--queue-url", url)["Tags"] == {"team": "payments"}
    entries = json.dumps([{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    sent = aws("send-message-batch", "--queue-url", url, "--entries", entries)
    assert len(sent["Successful"]) == 3
    got = aws("receive-message", "--queue-url", url, "--wait-time-seconds", "2")["Messages"][0]
    aws("change-message-visibility", "--queue-url", url, "--receipt-handle", got["ReceiptHandle"],
        "--visibility-timeout", "0")
    aws("set-queue-attributes", "--queue-url", url, "--attributes", "DelaySeconds=1")
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names",
                "DelaySeconds", "ApproximateNumberOfMessages")["Attributes"]
    assert attrs == {"DelaySeconds": "1", "ApproximateNumberOfMessages": "3"}
    aws("purge-queue", "--queue-url", url)
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names",
                "ApproximateNumberOfMessages")["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"
    assert aws("get-queue-url", "--queue-name", name)["QueueUrl"] == url
    aws("delete-queue", "--queue-url", url)


def test_the_aws_cli_starts_lists_and_cancels_a_message_move_task(name):
    dlq = aws("create-queue", "--queue-name", name + "-dlq")["QueueUrl"]
    dlq_arn = aws("get-queue-attributes", "--queue-url", dlq, "--attribute-names",
                  "QueueArn")["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})
    aws("create-queue", "--queue-name", name, "--attributes",
        json.dumps({"RedrivePolicy": policy}))
    aws("send-message", "--queue-url", dlq, "--message-body", "straight to the dlq")
    retry = aws("create-queue", "--queue-name", name + "-retry")["QueueUrl"]
    retry_arn = aws("get-queue-attributes", "--queue-url", retry, "--attribute-names",
                    "QueueArn")["Attributes"]["QueueArn"]
    handle = aws("start-message-move-task", "--source-arn", dlq_arn, "--destination-arn",
                 retry_arn)["TaskHandle"]
    assert handle
    for _ in range(200):
        entry = aws("list-message-move-tasks", "--source-arn", dlq_arn)["Results"][0]
        if entry["Status"] != "RUNNING":
            break
    assert entry["Status"] == "COMPLETED", entry
    assert entry["ApproximateNumberOfMessagesMoved"] == 1
    got = aws("receive-message", "--queue-url", retry, "--wait-time-seconds", "2")["Messages"][0]
    assert got["Body"] == "straight to the dlq"
