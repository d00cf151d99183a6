"""Fixtures for the SQS door's client suite.

The suite talks to a running sluice-server's SQS door at
SLUICE_SQS_ENDPOINT (http://HOST:PORT), which the Rust test
broker/tests/it/server_sqs_clients.rs starts on a free loopback port. It
never reaches any other address: credentials are dummies and no AWS
configuration file is read.
"""

import itertools
import os
import uuid

import boto3
import pytest
from botocore.config import Config

ENDPOINT = os.environ.get("SLUICE_SQS_ENDPOINT")
_names = itertools.count()


def pytest_configure(config):
    if not ENDPOINT:
        raise pytest.UsageError("SLUICE_SQS_ENDPOINT must name the SQS door, e.g. http://127.0.0.1:9324")


def make_client(access_key="test", region="us-east-1"):
    return boto3.client(
        "sqs",
        endpoint_url=ENDPOINT,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5),
    )


def system_names(sqs, names):
    """ReceiveMessage's system attribute names, in the member the client's
    model has: MessageSystemAttributeNames since botocore 1.34.x, the older
    AttributeNames before (the query-protocol run, botocore 1.33)."""
    members = sqs.meta.service_model.operation_model("ReceiveMessage").input_shape.members
    key = "MessageSystemAttributeNames" if "MessageSystemAttributeNames" in members else "AttributeNames"
    return {key: names}


@pytest.fixture
def sqs():
    return make_client()


@pytest.fixture
def name():
    """A queue name no other test uses."""
    return f"t{next(_names)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def queue(sqs, name):
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    yield url
    try:
        sqs.delete_queue(QueueUrl=url)
    except sqs.exceptions.QueueDoesNotExist:
        pass
