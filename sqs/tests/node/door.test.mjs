// The SQS door against the AWS SDK for JavaScript v3 (@aws-sdk/client-sqs,
// pinned in package.json): send, send batch, receive with attributes,
// delete. The SDK checks the MD5 of every body it sends and receives
// (@aws-sdk/middleware-sdk-sqs) and fails the call when one differs.
//
// Run with `node --test` by broker/tests/it/server_sqs_clients.rs against a
// server it starts: SLUICE_SQS_ENDPOINT names the door, SLUICE_NODE_MODULES
// the folder .ci/run installed the SDK into (target/node-sqs/node_modules).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(`${process.env.SLUICE_NODE_MODULES.replace(/\/$/, '')}/`);
const sdk = require('@aws-sdk/client-sqs');

const client = new sdk.SQSClient({
  endpoint: process.env.SLUICE_SQS_ENDPOINT,
  region: 'us-east-1',
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  maxAttempts: 1,
});

test('send, send batch, receive with attributes and delete, every MD5 checked', async () => {
  const { QueueUrl } = await client.send(new sdk.CreateQueueCommand({ QueueName: `node-${process.pid}` }));
  const sent = await client.send(new sdk.SendMessageCommand({
    QueueUrl,
    MessageBody: 'héllo from node ✓',
    MessageAttributes: {
      kind: { DataType: 'String', StringValue: 'greeting' },
      n: { DataType: 'Number', StringValue: '42' },
      raw: { DataType: 'Binary', BinaryValue: Uint8Array.from([0, 1, 2, 255]) },
    },
    MessageSystemAttributes: {
      AWSTraceHeader: { DataType: 'String', StringValue: 'Root=1-5759e988-bd862e3fe1be46a994272793' },
    },
  }));
  assert.ok(sent.MessageId);
  assert.match(sent.MD5OfMessageAttributes, /^[0-9a-f]{32}$/);
  assert.match(sent.MD5OfMessageSystemAttributes, /^[0-9a-f]{32}$/);

  const batch = await client.send(new sdk.SendMessageBatchCommand({
    QueueUrl,
    Entries: Array.from({ length: 5 }, (_, i) => ({
      Id: `m${i}`,
      MessageBody: `batch ${i}`,
      MessageAttributes: { i: { DataType: 'Number', StringValue: String(i) } },
    })),
  }));
  assert.equal(batch.Successful.length, 5);
  assert.equal((batch.Failed ?? []).length, 0);

  const got = [];
  for (let round = 0; round < 20 && got.length < 6; round++) {
    const r = await client.send(new sdk.ReceiveMessageCommand({
      QueueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 1,
      MessageAttributeNames: ['All'],
      MessageSystemAttributeNames: ['All'],
    }));
    for (const m of r.Messages ?? []) {
      got.push(m);
      await client.send(new sdk.DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  assert.equal(got.length, 6);
  const first = got.find((m) => m.Body === 'héllo from node ✓');
  assert.ok(first, 'the first message came back');
  assert.equal(first.MessageAttributes.kind.StringValue, 'greeting');
  assert.equal(first.MessageAttributes.n.StringValue, '42');
  assert.deepEqual([...first.MessageAttributes.raw.BinaryValue], [0, 1, 2, 255]);
  assert.equal(first.MD5OfMessageAttributes, sent.MD5OfMessageAttributes);
  assert.equal(first.Attributes.AWSTraceHeader, 'Root=1-5759e988-bd862e3fe1be46a994272793');
  assert.equal(first.Attributes.ApproximateReceiveCount, '1');
  assert.deepEqual(got.map((m) => m.Body).filter((b) => b.startsWith('batch')).sort(),
    ['batch 0', 'batch 1', 'batch 2', 'batch 3', 'batch 4']);

  const attrs = await client.send(new sdk.GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }));
  assert.equal(attrs.Attributes.ApproximateNumberOfMessages, '0');
  assert.equal(attrs.Attributes.ApproximateNumberOfMessagesNotVisible, '0');
  await client.send(new sdk.DeleteQueueCommand({ QueueUrl }));
});

test('an error comes back as the SDK\'s typed exception', async () => {
  await assert.rejects(
    client.send(new sdk.GetQueueUrlCommand({ QueueName: 'no-such-queue-from-node' })),
    (e) => e.name === 'QueueDoesNotExist' && e.$metadata.httpStatusCode === 400,
  );
});
