"""SigV4 checked by the SQS door (`--sqs-credentials`): boto3 with the
right secret works; a wrong secret, an unknown key, a tampered body, a
stale date and a missing signature are each refused with SQS's error;
presigned URLs work, and a tampered one is refused.

The suite runs with current botocore (the JSON protocol) and with
botocore 1.33 (the query protocol: boto3's calls are signed form posts, and
its generate_presigned_url makes the GETs the door answers).

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
import urllib.parse
import urllib.request

import boto3
import botocore.exceptions
import pytest
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

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


def presigned_url(action, operation, params, key=KEY, secret=SECRET, method="GET"):
    """A presigned URL of `action` with `params`, for `method`: boto3's
    generate_presigned_url where the client speaks the query protocol;
    with a JSON-protocol botocore, which presigns no query, the same
    SigV4QueryAuth signer on the query protocol's request."""
    sqs = client(key, secret)
    if sqs.meta.service_model.protocol == "query":
        return sqs.generate_presigned_url(operation, Params=params, ExpiresIn=300,
                                          HttpMethod=method)
    query = urllib.parse.urlencode({"Action": action, "Version": "2012-11-05", **params})
    req = AWSRequest(method=method, url=f"{ENDPOINT}/?{query}")
    SigV4QueryAuth(Credentials(key, secret), "sqs", "us-east-1", expires=300).add_auth(req)
    return req.url


def get(url, method="GET"):
    """(status, body text) of a GET (or an empty `method`) of `url`."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_presigned_urls_work_and_a_tampered_one_is_refused():
    assert "X-Amz-Signature=" in presigned_url("ListQueues", "list_queues", {})
    status, body = get(presigned_url("CreateQueue", "create_queue", {"QueueName": "presigned"}))
    assert status == 200 and "<CreateQueueResponse" in body, body
    assert f"/{ACCOUNT}/presigned</QueueUrl>" in body, body
    status, body = get(presigned_url("ListQueues", "list_queues", {"QueueNamePrefix": "pre"}))
    assert status == 200 and f"/{ACCOUNT}/presigned</QueueUrl>" in body, body
    tampered = presigned_url("ListQueues", "list_queues", {"QueueNamePrefix": "pre"}).replace(
        "QueueNamePrefix=pre", "QueueNamePrefix=pra")
    status, body = get(tampered)
    assert status == 403 and "<Code>SignatureDoesNotMatch</Code>" in body, body
    status, body = get(presigned_url("ListQueues", "list_queues", {}, secret=SECRET + "x"))
    assert status == 403 and "<Code>SignatureDoesNotMatch</Code>" in body, body
    status, body = get(presigned_url("ListQueues", "list_queues", {}, key="AKIDNOBODY"))
    assert status == 403 and "<Code>InvalidClientTokenId</Code>" in body, body
    # Signed for POST (boto3's default for SQS, whose model posts): good for
    # an empty POST, not for a GET.
    post = presigned_url("ListQueues", "list_queues", {}, method="POST")
    status, body = get(post, method="POST")
    assert status == 200 and "<ListQueuesResponse" in body, body
    status, body = get(post)
    assert status == 403 and "<Code>SignatureDoesNotMatch</Code>" in body, body
    client().delete_queue(QueueUrl=client().get_queue_url(QueueName="presigned")["QueueUrl"])
