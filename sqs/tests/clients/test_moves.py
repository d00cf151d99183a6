"""Message-move tasks through boto3: dead letters moved back to their
source queue at the rate asked for, or to a destination; listed while they
run and after; cancelled; refused on a queue that is no dead-letter queue.

The pace itself is checked with a manual clock in the door's unit tests
(sqs/src/door/moves/tasks.rs); here a task is only ever found to have moved
no more than its rate allows since before it was started, which a slow
machine cannot make fail."""

import json
import time

import botocore.exceptions
import pytest


def code(e):
    return e.value.response["Error"]["Code"]


def arn(sqs, url):
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def visible(sqs, url):
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def dead_letters(sqs, name, n):
    """A source queue and its dead-letter queue holding `n` dead letters:
    (source url, dlq url, dlq arn)."""
    dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
    source = sqs.create_queue(QueueName=name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})})["QueueUrl"]
    for first in range(0, n, 10):
        entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(first, min(n, first + 10))]
        assert len(sqs.send_message_batch(QueueUrl=source, Entries=entries)["Successful"]) == len(entries)
    # Each receive gives a message its first delivery (visible again at
    # once); the next one finds it past maxReceiveCount and dead-letters it.
    for _ in range(100):
        if visible(sqs, dlq) == n:
            break
        sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert visible(sqs, dlq) == n
    return source, dlq, arn(sqs, dlq)


def tasks(sqs, source_arn, max_results=10):
    # An empty list is no element at all in the query protocol's XML.
    return sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=max_results).get("Results", [])


def wait_for_end(sqs, source_arn, check=None, limit_s=60):
    """The newest task's entry once it is over; `check(entry)` on every
    entry seen on the way."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        entry = tasks(sqs, source_arn, 1)[0]
        if check:
            check(entry)
        if entry["Status"] not in ("RUNNING", "CANCELLING"):
            return entry
        time.sleep(0.05)
    raise AssertionError(f"the task did not end within {limit_s} s: {entry}")


def test_a_move_task_moves_dead_letters_back_at_the_rate_asked(sqs, name):
    source, dlq, dlq_arn = dead_letters(sqs, name, 6)
    before = time.monotonic()
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=3)["TaskHandle"]
    running = tasks(sqs, dlq_arn)
    assert len(running) == 1
    first = running[0]
    assert first["SourceArn"] == dlq_arn
    assert first["MaxNumberOfMessagesPerSecond"] == 3
    assert first["ApproximateNumberOfMessagesToMove"] == 6
    assert "DestinationArn" not in first
    if first["Status"] == "RUNNING":
        assert first["TaskHandle"] == handle

    def within_rate(entry):
        # Moved no faster than 1 + 3 a second since before the start.
        allowed = 1 + 3 * (time.monotonic() - before)
        assert entry["ApproximateNumberOfMessagesMoved"] <= allowed, (entry, allowed)

    done = wait_for_end(sqs, dlq_arn, within_rate)
    assert done["Status"] == "COMPLETED", done
    assert done["ApproximateNumberOfMessagesMoved"] == 6
    assert "TaskHandle" not in done
    assert visible(sqs, dlq) == 0
    assert visible(sqs, source) == 6
    # Back in the source with their receive counts reset.
    got = sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"])
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in got["Messages"]} == {"1"}


def test_a_move_task_to_a_destination_can_be_cancelled(sqs, name):
    _, dlq, dlq_arn = dead_letters(sqs, name, 20)
    dest = sqs.create_queue(QueueName=name + "-retry")["QueueUrl"]
    dest_arn = arn(sqs, dest)
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=dest_arn,
                                         MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    # One task per source at a time.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.start_message_move_task(SourceArn=dlq_arn)
    assert code(e) in ("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation")
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved < 20
    done = wait_for_end(sqs, dlq_arn)
    assert done["Status"] == "CANCELLED", done
    assert done["DestinationArn"] == dest_arn
    # Nothing lost: what moved is in the destination, the rest stayed.
    assert visible(sqs, dest) == done["ApproximateNumberOfMessagesMoved"]
    assert visible(sqs, dlq) + visible(sqs, dest) == 20
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert code(e) in ("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation")
    # A new task may start now, and moves the rest to their source.
    sqs.start_message_move_task(SourceArn=dlq_arn)
    assert wait_for_end(sqs, dlq_arn)["Status"] == "COMPLETED"
    assert visible(sqs, dlq) == 0
    assert len(tasks(sqs, dlq_arn)) == 2


def test_a_move_task_is_refused_on_a_queue_that_is_no_dead_letter_queue(sqs, queue, name):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.start_message_move_task(SourceArn=arn(sqs, queue))
    assert code(e) == "InvalidParameterValue"
    assert "Dead Letter Queue" in e.value.response["Error"]["Message"]
    missing = arn(sqs, queue).rsplit(":", 1)[0] + ":" + name + "-missing"
    for call in (lambda: sqs.start_message_move_task(SourceArn=missing),
                 lambda: sqs.list_message_move_tasks(SourceArn=missing),
                 lambda: sqs.cancel_message_move_task(TaskHandle="sluice-move-none")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert code(e) == "ResourceNotFoundException"
    assert tasks(sqs, arn(sqs, queue)) == []
