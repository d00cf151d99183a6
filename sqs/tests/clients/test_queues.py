"""Queue actions through boto3: create, look up, list, attributes, purge,
delete, and SQS's errors for each, as botocore raises them."""

import json
import time

import botocore.exceptions
import pytest

from conftest import make_client


def code(e):
    return e.value.response["Error"]["Code"]


def test_create_is_idempotent_and_differing_attributes_are_refused(sqs, name):
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    assert url.endswith(f"/000000000000/{name}")
    assert sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"] == url
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "8"})
    assert code(e) in ("QueueAlreadyExists", "QueueNameExists")
    sqs.delete_queue(QueueUrl=url)


def test_bad_names_and_attributes_are_refused(sqs):
    for bad in ["", "a" * 81, "has space", "dot.dot"]:
        with pytest.raises(botocore.exceptions.ClientError):
            sqs.create_queue(QueueName=bad)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.create_queue(QueueName="vt", Attributes={"VisibilityTimeout": "43201"})
    assert code(e) == "InvalidAttributeValue"


def test_get_queue_url_and_a_missing_queue(sqs, queue, name):
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == queue
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="no-such-queue-here")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=queue + "-gone", MessageBody="x")


def test_a_queue_is_found_by_the_urls_path_whatever_its_host(sqs, queue):
    other_host = queue.replace("127.0.0.1", "sluice.internal")
    sqs.send_message(QueueUrl=other_host, MessageBody="by path")
    got = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2)
    assert got["Messages"][0]["Body"] == "by path"


def test_list_queues_by_prefix_with_pages(sqs, name):
    urls = [sqs.create_queue(QueueName=f"{name}-{i}")["QueueUrl"] for i in range(5)]
    listed = sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
    assert sorted(listed) == sorted(urls)
    pages, token = [], None
    while True:
        kw = {"QueueNamePrefix": name, "MaxResults": 2}
        if token:
            kw["NextToken"] = token
        page = sqs.list_queues(**kw)
        pages.append(page.get("QueueUrls", []))
        token = page.get("NextToken")
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    assert sorted(sum(pages, [])) == sorted(urls)
    paginated = [u for p in sqs.get_paginator("list_queues").paginate(QueueNamePrefix=name, PaginationConfig={"PageSize": 3}) for u in p.get("QueueUrls", [])]
    assert sorted(paginated) == sorted(urls)
    for u in urls:
        sqs.delete_queue(QueueUrl=u)
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=name) or sqs.list_queues(QueueNamePrefix=name)["QueueUrls"] == []


def test_attributes_all_and_by_name_and_set(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="one")
    sqs.send_message(QueueUrl=queue, MessageBody="later", DelaySeconds=60)
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "1"
    assert attrs["ApproximateNumberOfMessagesDelayed"] == "1"
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    assert attrs["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:" + queue.rsplit("/", 1)[1]
    for key in ["VisibilityTimeout", "DelaySeconds", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds", "MaximumMessageSize"]:
        assert key in attrs, attrs
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"VisibilityTimeout": "45", "DelaySeconds": "2"})
    one = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["VisibilityTimeout"])["Attributes"]
    assert one == {"VisibilityTimeout": "45"}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=queue, Attributes={"DelaySeconds": "901"})
    assert code(e) == "InvalidAttributeValue"


def test_a_redrive_policy_is_set_read_and_removed(sqs, queue, name):
    dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"RedrivePolicy": policy})
    got = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(got["RedrivePolicy"]) == {"deadLetterTargetArn": arn, "maxReceiveCount": 3}
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"RedrivePolicy": ""})
    got = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in got
    sqs.delete_queue(QueueUrl=dlq)


def test_purge_and_delete(sqs, name):
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(3)])
    sqs.purge_queue(QueueUrl=url)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=name)


def test_two_accounts_never_share_a_queue(name):
    a = make_client(access_key="111111111111")
    b = make_client(access_key="222222222222")
    url_a = a.create_queue(QueueName=name)["QueueUrl"]
    assert "/111111111111/" in url_a
    with pytest.raises(b.exceptions.QueueDoesNotExist):
        b.get_queue_url(QueueName=name)
    a.send_message(QueueUrl=url_a, MessageBody="a's")
    url_b = b.create_queue(QueueName=name)["QueueUrl"]
    assert "/222222222222/" in url_b
    assert "Messages" not in b.receive_message(QueueUrl=url_b)
    assert a.receive_message(QueueUrl=url_a)["Messages"][0]["Body"] == "a's"
    a.delete_queue(QueueUrl=url_a)
    b.delete_queue(QueueUrl=url_b)


def test_actions_not_served_are_errors_not_500s(sqs, queue):
    for call in [
        lambda: sqs.add_permission(QueueUrl=queue, Label="l", AWSAccountIds=["123456789012"], Actions=["SendMessage"]),
        lambda: sqs.remove_permission(QueueUrl=queue, Label="l"),
    ]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_tags_are_set_listed_removed_and_bounded(sqs, name):
    url = sqs.create_queue(QueueName=name, tags={"team": "payments", "env": "dev"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments", "env": "dev"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "owner": "ana"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments", "env": "prod", "owner": "ana"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env", "not-there"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments", "owner": "ana"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "owner"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    for bad in [{"aws:reserved": "x"}, {"k" * 129: "x"}, {f"k{i}": "v" for i in range(51)}]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            sqs.tag_queue(QueueUrl=url, Tags=bad)
        assert code(e) == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.list_queue_tags(QueueUrl=url + "-gone")
    sqs.delete_queue(QueueUrl=url)


def test_policies_are_kept_as_given_and_removed_by_an_empty_value(sqs, queue):
    policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*",
                                                                  "Action": "sqs:SendMessage", "Resource": "*"}]})
    allow = json.dumps({"redrivePermission": "denyAll"})
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={
        "Policy": policy, "RedriveAllowPolicy": allow, "SqsManagedSseEnabled": "false"})
    got = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert got["Policy"] == policy and got["RedriveAllowPolicy"] == allow
    assert got["SqsManagedSseEnabled"] == "false"
    one = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["Policy"])["Attributes"]
    assert one == {"Policy": policy}
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"Policy": ""})
    got = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert "Policy" not in got and got["RedriveAllowPolicy"] == allow
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=queue, Attributes={"Policy": "not json"})
    assert code(e) == "InvalidAttributeValue"


def test_dead_letter_sources_are_listed_and_paged(sqs, name):
    dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "5"})
    sources = [sqs.create_queue(QueueName=f"{name}-src{i}", Attributes={"RedrivePolicy": policy})["QueueUrl"]
               for i in range(3)]
    other = sqs.create_queue(QueueName=f"{name}-plain")["QueueUrl"]
    got = sqs.list_dead_letter_source_queues(QueueUrl=dlq)
    assert got["queueUrls"] == sorted(sources) and "NextToken" not in got
    pages = [p["queueUrls"] for p in sqs.get_paginator("list_dead_letter_source_queues").paginate(
        QueueUrl=dlq, PaginationConfig={"PageSize": 2})]
    assert sum(pages, []) == sorted(sources), pages
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.list_dead_letter_source_queues(QueueUrl=dlq + "-gone")
    for url in sources + [other, dlq]:
        sqs.delete_queue(QueueUrl=url)


def test_created_and_last_modified_timestamps(sqs, name):
    before = int(time.time())
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    created = int(got["CreatedTimestamp"])
    assert before - 2 <= created <= int(time.time()) + 2
    assert int(got["LastModifiedTimestamp"]) == created
    time.sleep(1.1)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "1"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["CreatedTimestamp", "LastModifiedTimestamp"])
    assert int(got["Attributes"]["CreatedTimestamp"]) == created
    assert int(got["Attributes"]["LastModifiedTimestamp"]) > created
    with pytest.raises(botocore.exceptions.ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"CreatedTimestamp": "1"})
    assert code(e) == "InvalidAttributeName"
    sqs.delete_queue(QueueUrl=url)
