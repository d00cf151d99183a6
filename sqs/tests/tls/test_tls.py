"""The SQS door over HTTPS with the server's certificate (--tls-cert and
--tls-key, signed by a test CA): boto3 verifies it against the CA, queue
URLs are https://, the binary port presents the same certificate, and
bytes that are no TLS on the door's port are refused without harm.

Run by broker/tests/it/server_sqs_clients.rs against a server it starts
with the test PKI (SLUICE_SQS_ENDPOINT, SLUICE_CA, SLUICE_BINARY)."""

import os
import socket
import ssl

import boto3
from botocore.config import Config

ENDPOINT = os.environ["SLUICE_SQS_ENDPOINT"]
CA = os.environ["SLUICE_CA"]
BINARY = os.environ["SLUICE_BINARY"]


def client():
    return boto3.client("sqs", endpoint_url=ENDPOINT, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test",
                        verify=CA, config=Config(retries={"max_attempts": 1}))


def test_boto3_over_https_verifies_the_certificate():
    sqs = client()
    url = sqs.create_queue(QueueName="over-tls")["QueueUrl"]
    assert url.startswith("https://"), url
    sqs.send_message(QueueUrl=url, MessageBody="encrypted")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"][0]
    assert got["Body"] == "encrypted"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
    assert url in sqs.list_queues()["QueueUrls"]
    sqs.delete_queue(QueueUrl=url)


def _certificate(hostport):
    host, port = hostport.rsplit(":", 1)
    return ssl.get_server_certificate((host, int(port)))


def test_the_binary_port_and_the_door_share_the_certificate():
    door = ENDPOINT.split("://", 1)[1]
    assert _certificate(door) == _certificate(BINARY)


def test_bytes_that_are_not_tls_are_refused_and_the_door_goes_on():
    host, port = ENDPOINT.split("://", 1)[1].rsplit(":", 1)
    for junk in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\xff\xff" + b"\x00" * 64, os.urandom(512)]:
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(junk)
            try:
                while s.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
    url = client().create_queue(QueueName="still-serving")["QueueUrl"]
    assert url.startswith("https://")
