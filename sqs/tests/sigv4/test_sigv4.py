"""SigV4 checked by the SQS door (`--sqs-credentials`): boto3 with the
right secret works; a wrong secret, an unknown key, a tampered body, a
stale date and a missing signature are each refused with SQS's error.

Run by broker/tests/it/server_sqs_clients.rs against a server it starts
with a credentials file of one key (SLUICE_SQS_KEY, SLUICE_SQS_SECRET,
SLUICE_SQS_ACCOUNT). The signer below is written from AWS's description of
Signature Version 4, apart from botocore's, so that a request can be
signed and then tampered with, or signed at another time."""

import datetime
import hashlib
import hmac
import json
import os
import urllib.error
import urllib.request

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

ENDPOINT = os.environ["SLUICE_SQS_ENDPOINT"]
KEY = os.environ["SLUICE_SQS_KEY"]
SECRET = os.environ["SLUICE_SQS_SECRET"]
ACCOUNT = os.environ["SLUICE_SQS_ACCOUNT"]
HOST = ENDPOINT.split("://", 1)[1]


def client(key=KEY, secret=SECRET):
    return boto3.client("sqs", endpoint_url=ENDPOINT, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        config=Config(retries={"max_attempts": 1}))


def code(e):
    return e.value.response["Error"]["Code"]


def _hmac(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_call(action, body, when=None, secret=SECRET, tamper=None):
    """An AWS JSON 1.0 call signed at `when`; `tamper` changes the body
    after signing. Returns (status, parsed body)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload = json.dumps(body).encode()
    headers = {
        "content-type": "application/x-amz-json-1.0",
        "host": HOST,
        "x-amz-date": amz_date,
        "x-amz-target": f"AmazonSQS.{action}",
    }
    names = sorted(headers)
    canonical = "\n".join([
        "POST", "/", "",
        "".join(f"{n}:{headers[n]}\n" for n in names),
        ";".join(names),
        hashlib.sha256(payload).hexdigest(),
    ])
    scope = f"{day}/us-east-1/sqs/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(("AWS4" + secret).encode(), day)
    for part in ("us-east-1", "sqs", "aws4_request"):
        k = _hmac(k, part)
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={KEY}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    if tamper:
        payload = tamper(payload)
    req = urllib.request.Request(ENDPOINT + "/", data=payload, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_the_right_secret_works_and_names_the_keys_account():
    sqs = client()
    url = sqs.create_queue(QueueName="signed")["QueueUrl"]
    assert f"/{ACCOUNT}/signed" in url
    sqs.send_message(QueueUrl=url, MessageBody="checked")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"][0]
    assert got["Body"] == "checked"
    status, body = signed_call("ListQueues", {})
    assert status == 200 and url in body["QueueUrls"], body
    sqs.delete_queue(QueueUrl=url)


def test_a_wrong_secret_or_an_unknown_key_is_refused():
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(secret=SECRET + "x").list_queues()
    assert code(e) == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client(key="AKIDNOBODY").list_queues()
    assert code(e) == "InvalidClientTokenId"


def test_a_tampered_body_a_stale_date_and_no_signature_are_refused():
    status, body = signed_call("CreateQueue", {"QueueName": "a"},
                               tamper=lambda p: p.replace(b'"a"', b'"b"'))
    assert status == 403 and body["__type"].endswith("#SignatureDoesNotMatch"), body
    stale = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
    status, body = signed_call("ListQueues", {}, when=stale)
    assert status == 400 and body["__type"].endswith("#RequestExpired"), body
    req = urllib.request.Request(ENDPOINT + "/", data=b"{}", method="POST", headers={
        "content-type": "application/x-amz-json-1.0", "x-amz-target": "AmazonSQS.ListQueues"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 403
    assert json.loads(e.value.read())["__type"].endswith("#MissingAuthenticationToken")
