"""A kombu round trip over its SQS transport (the one Celery uses with
`broker_url = "sqs://..."`), against the door at SLUICE_SQS_ENDPOINT:
kombu creates its queue, publishes, consumes and acknowledges through the
door, and a message it does not acknowledge comes back.

Run by broker/tests/it/server_sqs_clients.rs with the Python of
target/venv-sqs (kombu[sqs] pinned in sqs/tests/clients/requirements.txt)."""

import os
import uuid

from kombu import Connection, Exchange, Queue

ENDPOINT = os.environ["SLUICE_SQS_ENDPOINT"]
HOST_PORT = ENDPOINT.split("://", 1)[1]


def connection():
    return Connection(
        f"sqs://test:test@{HOST_PORT}",
        transport_options={
            "region": "us-east-1",
            "is_secure": False,
            "wait_time_seconds": 1,
            "polling_interval": 0.1,
            "visibility_timeout": 1,
        },
    )


def test_kombu_publishes_consumes_and_acknowledges():
    name = f"kombu-{uuid.uuid4().hex[:8]}"
    with connection() as conn:
        queue = conn.SimpleQueue(name)
        queue.put({"order": 42, "text": "héllo"})
        msg = queue.get(block=True, timeout=20)
        assert msg.payload == {"order": 42, "text": "héllo"}
        msg.ack()
        queue.put({"order": 43})
        assert queue.get(block=True, timeout=20).payload == {"order": 43}
        # Not acknowledged: after its visibility timeout it comes back.
        again = queue.get(block=True, timeout=20)
        assert again.payload == {"order": 43}
        again.ack()
        queue.close()


def test_kombu_consumer_drains_events_from_an_exchange():
    name = f"kombu-{uuid.uuid4().hex[:8]}"
    exchange = Exchange(name, type="direct")
    queue = Queue(name, exchange, routing_key=name)
    got = []
    with connection() as conn:
        producer = conn.Producer(serializer="json")
        producer.publish({"n": 1}, exchange=exchange, routing_key=name, declare=[queue])
        producer.publish({"n": 2}, exchange=exchange, routing_key=name, declare=[queue])

        def on_message(body, message):
            got.append(body["n"])
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message]):
            for _ in range(40):
                if len(got) == 2:
                    break
                try:
                    conn.drain_events(timeout=1)
                except TimeoutError:
                    pass
    assert sorted(got) == [1, 2]
