"""Message actions through boto3: send (alone and in batches), receive with
its attribute filters, delete, change visibility, and SQS's MD5s checked
against values AWS published."""

import hashlib
import json
import threading

import botocore.exceptions
import pytest

from conftest import system_names


def code(e):
    return e.value.response["Error"]["Code"]


def test_send_receive_delete_with_md5s(sqs, queue):
    body = "héllo wörld"
    sent = sqs.send_message(QueueUrl=queue, MessageBody=body)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    got = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2)["Messages"][0]
    assert got["Body"] == body
    assert got["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert got["MessageId"] == sent["MessageId"]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=got["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)


def test_the_md5_of_attributes_matches_the_value_aws_published(sqs, queue):
    # The aws CLI's own example for send-message-batch (awscli/examples/sqs/
    # send-message-batch.rst) gives SQS's answer to this entry, shortened
    # to its first and last 8 hex digits.
    entry = {
        "Id": "FuelReport-0001-2015-09-16T140731Z",
        "MessageBody": "Fuel report for account 0001 on 2015-09-16 at 02:07:31 PM.",
        "MessageAttributes": {
            "SellerName": {"DataType": "String", "StringValue": "Example Store"},
            "City": {"DataType": "String", "StringValue": "Any City"},
            "Region": {"DataType": "String", "StringValue": "WA"},
            "PostalCode": {"DataType": "String", "StringValue": "99065"},
            "PricePerGallon": {"DataType": "Number", "StringValue": "1.99"},
        },
    }
    ok = sqs.send_message_batch(QueueUrl=queue, Entries=[entry])["Successful"][0]
    assert ok["MD5OfMessageBody"][:8] + ok["MD5OfMessageBody"][-8:] == "203c4a38" + "7943237e"
    attrs = ok["MD5OfMessageAttributes"]
    assert attrs[:8] + attrs[-8:] == "10809b55" + "baf283ef", attrs
    got = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"], WaitTimeSeconds=2)["Messages"][0]
    assert got["MD5OfMessageAttributes"] == attrs
    assert got["MessageAttributes"]["PricePerGallon"] == {"DataType": "Number", "StringValue": "1.99"}


def test_binary_attributes_and_filters(sqs, queue):
    sqs.send_message(
        QueueUrl=queue, MessageBody="x",
        MessageAttributes={
            "app.kind": {"DataType": "String", "StringValue": "a"},
            "app.blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
            "other": {"DataType": "Number.int", "StringValue": "5"},
        },
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}},
    )
    got = sqs.receive_message(
        QueueUrl=queue, MessageAttributeNames=["app.*"], WaitTimeSeconds=2,
        VisibilityTimeout=0, **system_names(sqs, ["All"]),
    )["Messages"][0]
    assert set(got["MessageAttributes"]) == {"app.kind", "app.blob"}
    assert got["MessageAttributes"]["app.blob"]["BinaryValue"] == b"\x00\x01\xff"
    assert got["Attributes"]["AWSTraceHeader"] == "Root=1-5759e988-bd862e3fe1be46a994272793"
    for key in ["ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"]:
        assert key in got["Attributes"], got["Attributes"]
    again = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["other"], AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert set(again["MessageAttributes"]) == {"other"}
    assert again["Attributes"] == {"ApproximateReceiveCount": "2"}


def test_batch_limits_and_per_entry_failures(sqs, queue):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
    assert code(e) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}])
    assert code(e) == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": "bad id!", "MessageBody": "x"}])
    assert code(e) == "AWS.SimpleQueueService.InvalidBatchEntryId"
    sent = sqs.send_message_batch(QueueUrl=queue, Entries=[
        {"Id": "ok", "MessageBody": "fine"},
        {"Id": "late", "MessageBody": "x", "DelaySeconds": 901},
    ])
    assert [s["Id"] for s in sent["Successful"]] == ["ok"]
    assert sent["Failed"][0]["Id"] == "late" and sent["Failed"][0]["SenderFault"] is True


def test_delete_and_visibility_batches(sqs, queue):
    sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(4)])
    got = []
    while len(got) < 4:
        got += sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=60, WaitTimeSeconds=1).get("Messages", [])
    changed = sqs.change_message_visibility_batch(QueueUrl=queue, Entries=[
        {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
        {"Id": "b", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 0},
    ])
    assert [s["Id"] for s in changed["Successful"]] == ["a"]
    assert changed["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    deleted = sqs.delete_message_batch(QueueUrl=queue, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[1:])
    ])
    assert len(deleted["Successful"]) == 3 and not deleted.get("Failed")
    back = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2)["Messages"][0]
    assert back["Body"] == got[0]["Body"]


def test_a_stale_receipt_handle_deletes_nothing_and_succeeds(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="x")
    first = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0, WaitTimeSeconds=2)["Messages"][0]
    second = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=30, WaitTimeSeconds=2)["Messages"][0]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=first["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "1"
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=second["ReceiptHandle"])
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=queue, ReceiptHandle="garbage")


def test_limits_are_refused_with_sqs_codes(sqs, queue):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=11)
    assert code(e) in ("InvalidParameterValue", "ReadCountOutOfRange")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=21)
    assert code(e) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.send_message(QueueUrl=queue, MessageBody="x", DelaySeconds=901)
    assert code(e) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError):
        sqs.send_message(QueueUrl=queue, MessageBody="\x00 is not allowed")


def test_a_long_poll_is_answered_when_a_message_arrives(sqs, queue):
    threading.Timer(0.2, lambda: sqs.send_message(QueueUrl=queue, MessageBody="now")).start()
    got = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=20)
    assert got["Messages"][0]["Body"] == "now"


def test_a_dead_letter_names_its_source_queue(sqs, name):
    dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source = sqs.create_queue(QueueName=name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]
    source_arn = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.send_message(QueueUrl=source, MessageBody="poison",
                     MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}})
    got = sqs.receive_message(QueueUrl=source, WaitTimeSeconds=2)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=source, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0)
    # The second receive would pass maxReceiveCount 1: the message moves.
    assert "Messages" not in sqs.receive_message(QueueUrl=source)
    dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=2, VisibilityTimeout=0,
                               MessageAttributeNames=["All"],
                               **system_names(sqs, ["DeadLetterQueueSourceArn"]))["Messages"][0]
    assert dead["Attributes"] == {"DeadLetterQueueSourceArn": source_arn}
    # botocore checks MD5OfMessageAttributes; the source is not among them.
    assert list(dead["MessageAttributes"]) == ["k"]
    again = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"][0]
    assert again["Attributes"]["DeadLetterQueueSourceArn"] == source_arn
    plain = sqs.send_message(QueueUrl=dlq, MessageBody="straight")
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=again["ReceiptHandle"])
    direct = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=2, AttributeNames=["All"])["Messages"][0]
    assert direct["MessageId"] == plain["MessageId"]
    assert "DeadLetterQueueSourceArn" not in direct["Attributes"]
    sqs.delete_queue(QueueUrl=source)
    sqs.delete_queue(QueueUrl=dlq)
