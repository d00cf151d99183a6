# An SQS user's first flow against sluice, with boto3 unchanged.
# Start the broker (`cargo run --release --bin sluice-server`), then:
#   python3 first_flow.py
import os
import threading
import time

import boto3

sqs = boto3.client(
    "sqs",
    endpoint_url=os.environ.get("SLUICE_SQS_ENDPOINT", "http://127.0.0.1:9324"),
    region_name="us-east-1",
    aws_access_key_id="test",  # any key is accepted
    aws_secret_access_key="test",
)

# A dead-letter queue, and a queue that sends a message there after 2 receives.
dlq_url = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
queue_url = sqs.create_queue(
    QueueName="orders",
    Attributes={
        "VisibilityTimeout": "1",
        "RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"2"}}',
    },
)["QueueUrl"]

# Ten messages in one call, each with an attribute.
sent = sqs.send_message_batch(
    QueueUrl=queue_url,
    Entries=[
        {"Id": str(i), "MessageBody": f"order {i}",
         "MessageAttributes": {"n": {"DataType": "Number", "StringValue": str(i)}}}
        for i in range(10)
    ],
)
assert len(sent["Successful"]) == 10, sent

# Receive one, process it, delete it.
messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=messages["Messages"][0]["ReceiptHandle"])

# Receive the other nine and delete all but one, as if its consumer crashed.
rest = []
while len(rest) < 9:
    rest += sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
left = rest.pop()
for m in rest:
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])

# Its lease ends after 1 s and it is delivered again: the second receive.
again = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])
assert again["Messages"][0]["Body"] == left["Body"], again
print("received again, ApproximateReceiveCount =", again["Messages"][0]["Attributes"]["ApproximateReceiveCount"])

# Its third receive finds it past maxReceiveCount: it is in the dead-letter queue.
third = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=3)
assert "Messages" not in third, third
dead = sqs.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=5)
assert dead["Messages"][0]["Body"] == left["Body"], dead
print("in the dead-letter queue:", dead["Messages"][0]["Body"])

# A consumer gives a message back at once: visibility 0.
sqs.send_message(QueueUrl=queue_url, MessageBody="give back")
got = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=30, WaitTimeSeconds=5)["Messages"][0]
sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0)
back = sqs.receive_message(QueueUrl=queue_url)
assert back["Messages"][0]["Body"] == "give back", back
print("visible again at once:", back["Messages"][0]["Body"])

# A long poll is answered as soon as another thread sends.
threading.Timer(0.3, lambda: sqs.send_message(QueueUrl=queue_url, MessageBody="wake up")).start()
started = time.monotonic()
woke = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=2)
assert woke["Messages"][0]["Body"] == "wake up", woke
print(f"long poll answered after {time.monotonic() - started:.2f} s")

sqs.purge_queue(QueueUrl=queue_url)
for url in (queue_url, dlq_url):
    sqs.delete_queue(QueueUrl=url)
print("done")
