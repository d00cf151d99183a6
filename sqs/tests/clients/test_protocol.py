"""The protocol botocore speaks in this run: the AWS JSON 1.0 protocol
(botocore 1.34.90 and later) or the query protocol (botocore 1.33, the
second run of this suite), as SLUICE_SQS_PROTOCOL says."""

import os

from conftest import make_client


def test_the_client_speaks_the_protocol_asked_for():
    """The run's protocol (SLUICE_SQS_PROTOCOL, json unless set) is the one
    botocore speaks, so a query-protocol run cannot pass on JSON."""
    want = os.environ.get("SLUICE_SQS_PROTOCOL", "json")
    assert make_client().meta.service_model.protocol == want
