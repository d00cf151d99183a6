"""FIFO queues through boto3: created with the suffix and the attribute,
each message group delivered in send order with one batch in flight at a
time, a release putting a message back first in its group, deduplication
by id and by content, sequence numbers that rise, and a receive retried
with its ReceiveRequestAttemptId."""

import hashlib
import time

import botocore.exceptions
import pytest

from conftest import system_names


def code(e):
    return e.value.response["Error"]["Code"]


@pytest.fixture
def fifo(sqs, name):
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


def receive(sqs, url, n=10):
    return sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=n,
        WaitTimeSeconds=0,
        **system_names(sqs, ["All"]),
    ).get("Messages", [])


def test_a_fifo_queue_needs_the_suffix_and_the_attribute(sqs, name):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.create_queue(QueueName=f"{name}.fifo")
    assert code(e) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})
    assert code(e) == "InvalidParameterValue"
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true"
    assert attrs["ContentBasedDeduplication"] == "true"
    assert attrs["DeduplicationScope"] == "queue"
    assert attrs["FifoThroughputLimit"] == "perQueue"
    assert url in sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "messageGroup"})
    assert code(e) == "InvalidAttributeValue"
    sqs.delete_queue(QueueUrl=url)


def test_a_group_is_delivered_in_order_one_batch_at_a_time(sqs, fifo):
    entries = [
        {"Id": f"{g}{i}", "MessageBody": f"{g}{i}", "MessageGroupId": g, "MessageDeduplicationId": f"{g}{i}"}
        for i in range(3)
        for g in ("a", "b")
    ]
    sent = sqs.send_message_batch(QueueUrl=fifo, Entries=entries)
    assert len(sent["Successful"]) == 6 and not sent.get("Failed")
    first = receive(sqs, fifo)
    bodies = [m["Body"] for m in first]
    assert [b for b in bodies if b.startswith("a")] == ["a0", "a1", "a2"]
    assert [b for b in bodies if b.startswith("b")] == ["b0", "b1", "b2"]
    # Every group flies: nothing more until they are back or deleted.
    assert receive(sqs, fifo) == []
    groups = {m["Attributes"]["MessageGroupId"] for m in first}
    assert groups == {"a", "b"}
    # a0 released: it comes back first, but only once a1 and a2 are settled
    # too (they are in flight in the same group).
    a = [m for m in first if m["Body"].startswith("a")]
    sqs.change_message_visibility(QueueUrl=fifo, ReceiptHandle=a[0]["ReceiptHandle"], VisibilityTimeout=0)
    assert receive(sqs, fifo) == []
    for m in a[1:]:
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    again = receive(sqs, fifo)
    assert [m["Body"] for m in again] == ["a0"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_sends_are_deduplicated_and_numbered(sqs, fifo):
    one = sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d1")
    two = sqs.send_message(QueueUrl=fifo, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d1")
    assert two["MessageId"] == one["MessageId"], "the same dedup id within 5 minutes"
    three = sqs.send_message(QueueUrl=fifo, MessageBody="z", MessageGroupId="g", MessageDeduplicationId="d2")
    assert int(three["SequenceNumber"]) > int(one["SequenceNumber"])
    got = receive(sqs, fifo)
    assert [m["Body"] for m in got] == ["x", "z"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == "d1"
    assert got[0]["Attributes"]["SequenceNumber"] == one["SequenceNumber"]
    # Without an id, on a queue that does not deduplicate by content.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=fifo, MessageBody="w", MessageGroupId="g")
    assert code(e) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=fifo, MessageBody="w", MessageDeduplicationId="d3")
    assert code(e) == "MissingParameter"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=fifo, MessageBody="w", MessageGroupId="g", MessageDeduplicationId="d4", DelaySeconds=1)
    assert code(e) == "InvalidParameterValue"


def receive_attempt(sqs, url, attempt):
    return sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=0,
        ReceiveRequestAttemptId=attempt,
        **system_names(sqs, ["All"]),
    ).get("Messages", [])


def test_a_retried_receive_gets_the_same_messages_while_it_fits(sqs, fifo):
    for i in range(3):
        sqs.send_message(QueueUrl=fifo, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=f"m{i}")
    first = receive_attempt(sqs, fifo, "attempt-1")
    assert [m["Body"] for m in first] == ["m0", "m1", "m2"]
    # The reply was lost; the retry gets the same messages and receipt
    # handles, where a receive without the id gets nothing (the group flies).
    again = receive_attempt(sqs, fifo, "attempt-1")
    assert [(m["Body"], m["ReceiptHandle"]) for m in again] == [(m["Body"], m["ReceiptHandle"]) for m in first]
    assert receive(sqs, fifo) == []
    assert receive_attempt(sqs, fifo, "attempt-2") == []
    # Once one of them is deleted, a retry does not fit cleanly: it is a new
    # receive (nothing, while the rest of the group flies).
    sqs.delete_message(QueueUrl=fifo, ReceiptHandle=first[0]["ReceiptHandle"])
    assert receive_attempt(sqs, fifo, "attempt-1") == []
    for m in first[1:]:
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    with pytest.raises(botocore.exceptions.ClientError) as e:
        receive_attempt(sqs, fifo, "not valid")
    assert code(e) == "InvalidParameterValue"


def test_a_retry_leases_its_messages_again(sqs, name):
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "1"},
    )["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="slow", MessageGroupId="g")
    first = receive_attempt(sqs, url, "a")
    assert [m["Body"] for m in first] == ["slow"]
    # Each retry starts the one-second lease again, so the message never
    # comes back to a receive without the id, and its receipt stays good.
    for _ in range(3):
        time.sleep(0.6)
        again = receive_attempt(sqs, url, "a")
        assert [m["ReceiptHandle"] for m in again] == [first[0]["ReceiptHandle"]]
        assert receive(sqs, url) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    sqs.delete_queue(QueueUrl=url)


def test_content_based_deduplication_hashes_the_body(sqs, name):
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    one = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g1")
    two = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g2")
    assert two["MessageId"] == one["MessageId"]
    sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g1")
    got = receive(sqs, url)
    assert [m["Body"] for m in got] == ["same", "other"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"same").hexdigest()
    sqs.delete_queue(QueueUrl=url)


def test_a_standard_queue_refuses_a_dedup_id_and_has_no_fifo_attributes(sqs, queue):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x", MessageDeduplicationId="d")
    assert code(e) == "InvalidParameterValue"
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert "FifoQueue" not in attrs
