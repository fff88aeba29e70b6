// The hand-written codec of lib/codec.js against proto-loader (protobufjs)
// on the same .proto files: what one encodes the other must decode to the
// same values, in both directions. No server needed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadProtos } from '../index.js';
import {
  Writer,
  encodePublishStreamRequest,
  encodeStreamingSubscribeRequest,
  decodePublishStreamResponse,
  decodeSubscribeResponse,
} from '../lib/codec.js';
import { Message } from '../lib/message.js';

const methods = loadProtos().definition['redq.v1.QueueService'];
const publishStream = methods.PublishStream;
const streamingSubscribe = methods.StreamingSubscribe;

const record = (fields) => ({
  payload: Buffer.from('x'),
  attributes: null,
  orderingKey: '',
  dedupeId: null,
  deliverAt: undefined,
  delay: undefined,
  ...fields,
});

test('PublishStreamRequest: every field, short and long values', () => {
  const w = new Writer(16); // tiny, so that it has to grow
  const long = 'é'.repeat(300); // 600 bytes: a two-byte length, measured
  const records = [
    record({ payload: Buffer.from('hello') }),
    record({
      payload: Buffer.alloc(70_000, 7), // a three-byte length: the body moves
      attributes: { kind: 'created', long, n: 3 },
      orderingKey: 'customer-7',
      dedupeId: 'order-42',
      deliverAt: Date.UTC(2030, 0, 2, 3, 4, 5, 678),
    }),
    record({ payload: new Uint8Array([1, 2, 3]), delay: 1500 }),
    record({ delay: 0 }),
  ];
  const prefix = Buffer.from('pfx-');
  const buf = encodePublishStreamRequest(w, 2 ** 33 + 5, 'orders', records, prefix, 2 ** 40);
  const decoded = publishStream.requestDeserialize(buf);
  assert.equal(decoded.requestId, 2 ** 33 + 5);
  assert.equal(decoded.topic, 'orders');
  assert.equal(decoded.dedupeId, 'pfx-' + (2 ** 40).toString(36), 'the request dedupe id');
  assert.equal(decoded.messages.length, 4);
  const [a, b, c, d] = decoded.messages;
  assert.deepEqual(a.payload, Buffer.from('hello'));
  assert.equal(a.dedupeId, '', 'messages get no automatic dedupe id');
  assert.equal(a.deliverAt, null);
  assert.equal(a.delay, null);
  assert.deepEqual(b.payload, Buffer.alloc(70_000, 7));
  assert.deepEqual({ ...b.attributes }, { kind: 'created', long, n: '3' });
  assert.equal(b.orderingKey, 'customer-7');
  assert.equal(b.dedupeId, 'order-42');
  assert.deepEqual(b.deliverAt, { seconds: Date.UTC(2030, 0, 2, 3, 4, 5) / 1000, nanos: 678e6 });
  assert.deepEqual(c.payload, Buffer.from([1, 2, 3]));
  assert.equal(c.dedupeId, '');
  assert.deepEqual(c.delay, { seconds: 1, nanos: 500e6 });
  assert.deepEqual(d.delay, { seconds: 0, nanos: 0 }, 'a zero delay is sent, not left unset');

  // Without the automatic prefix no dedupe_id is sent; the writer is reused.
  const again = publishStream.requestDeserialize(encodePublishStreamRequest(w, 1, 't', [record({})], null, 0));
  assert.equal(again.dedupeId, '');
  assert.equal(again.messages[0].dedupeId, '');
});

test('StreamingSubscribeRequest: the opening request and acks of received messages', () => {
  const w = new Writer();
  const open = streamingSubscribe.requestDeserialize(
    encodeStreamingSubscribeRequest(w, {
      subscribe: {
        topic: 'orders',
        subscription: 'billing',
        consumer: 'worker-1',
        maxOutstandingMessages: 250,
        maxOutstandingBytes: 2 ** 34,
        ackDeadline: 30_000,
        start: 'latest',
        retryPolicy: { minimumBackoff: 100, maximumBackoff: 60_000 },
        maxDeliveryAttempts: 5,
        enableMessageOrdering: true,
      },
    }),
  );
  assert.deepEqual(open.subscribe, {
    topic: 'orders',
    subscription: 'billing',
    consumer: 'worker-1',
    maxOutstandingMessages: 250,
    maxOutstandingBytes: 2 ** 34,
    ackDeadline: { seconds: 30, nanos: 0 },
    start: 'START_POSITION_LATEST',
    retryPolicy: { minimumBackoff: { seconds: 0, nanos: 100e6 }, maximumBackoff: { seconds: 60, nanos: 0 } },
    maxDeliveryAttempts: 5,
    enableMessageOrdering: true,
    pattern: '',
  });

  // A pattern instead of a topic.
  const byPattern = streamingSubscribe.requestDeserialize(
    encodeStreamingSubscribeRequest(w, { subscribe: { topic: '', pattern: 'sensors.*.temp', subscription: 'dashboard' } }),
  );
  assert.equal(byPattern.subscribe.topic, '');
  assert.equal(byPattern.subscribe.pattern, 'sensors.*.temp');
  assert.equal(byPattern.subscribe.subscription, 'dashboard');

  // Ack ids are written back from the bytes they were received in.
  const response = methods.StreamingSubscribe.responseSerialize({
    messages: ['a/1/c/1', 'b/1/c/2', 'c/2/c/3'].map((ackId) => ({ ackId, message: { id: ackId, payload: Buffer.from('p') } })),
  });
  const [m1, m2, m3] = decodeSubscribeResponse(response).messages;
  const req = streamingSubscribe.requestDeserialize(
    encodeStreamingSubscribeRequest(w, {
      acks: [m1, m2],
      nacks: [m3],
      nackDelay: 0,
      modifies: [m1],
      modifyDeadline: 45_000,
      maxOutstandingMessages: 10,
      confirm: true,
      tag: 'tag-7',
    }),
  );
  assert.equal(req.subscribe, null);
  assert.deepEqual(req.ackIds, ['a/1/c/1', 'b/1/c/2', 'tag-7'], 'the tag goes last, as one more ack id');
  assert.deepEqual(req.nackIds, ['c/2/c/3']);
  assert.deepEqual(req.nackDelay, { seconds: 0, nanos: 0 });
  assert.deepEqual(req.modifyDeadlineAckIds, ['a/1/c/1']);
  assert.deepEqual(req.modifyDeadline, { seconds: 45, nanos: 0 });
  assert.equal(req.maxOutstandingMessages, 10);
  assert.equal(req.confirm, true);

  const nackDefault = streamingSubscribe.requestDeserialize(encodeStreamingSubscribeRequest(w, { nacks: [m3] }));
  assert.equal(nackDefault.nackDelay, null, 'no delay: the retry backoff');
});

test('SubscribeResponse: messages and a confirmation', () => {
  const publishTime = { seconds: 1_764_470_000, nanos: 123_456_789 };
  const buf = methods.StreamingSubscribe.responseSerialize({
    messages: [
      {
        ackId: '1764470000000-0/1/consumer-5fe46c5f899a/9c1f04d2',
        message: {
          id: '1764470000000-0',
          payload: Buffer.from('hello'),
          attributes: { kind: 'created', 'ключ': 'значение' },
          orderingKey: 'customer-7',
          publishTime,
          deliverAt: { seconds: 1_764_470_090, nanos: 0 },
          topic: 'orders',
        },
        deliveryAttempt: 3,
      },
      { ackId: 'x', message: { id: 'y' }, deliveryAttempt: 1 },
    ],
    confirmation: { ackedIds: ['a', 'b'], lostIds: ['c'], invalidIds: ['d'] },
    dropped: 2 ** 40 + 3,
  });
  const { messages, confirmation, dropped } = decodeSubscribeResponse(buf);
  assert.equal(dropped, 2 ** 40 + 3);
  assert.equal(messages.length, 2);
  const [m, empty] = messages;
  assert.ok(m instanceof Message);
  assert.equal(m.ackId, '1764470000000-0/1/consumer-5fe46c5f899a/9c1f04d2');
  assert.equal(m.id, '1764470000000-0');
  assert.deepEqual(m.payload, Buffer.from('hello'));
  assert.deepEqual(m.attributes, { kind: 'created', 'ключ': 'значение' });
  assert.equal(m.orderingKey, 'customer-7');
  assert.equal(m.publishTime.getTime(), 1_764_470_000_123);
  assert.equal(m.deliverAt.getTime(), 1_764_470_090_000);
  assert.equal(m.deliveryAttempt, 3);
  assert.equal(m.topic, 'orders');
  assert.equal(m._hasAckId, true);
  assert.equal(empty.topic, '');
  assert.deepEqual(empty.payload, Buffer.alloc(0));
  assert.deepEqual(empty.attributes, {});
  assert.equal(empty.orderingKey, '');
  assert.deepEqual(
    [confirmation.acked, confirmation.nacked, confirmation.modified, confirmation.lost, confirmation.invalid, confirmation.total],
    [2, 0, 0, 1, 1, 4],
    'counted without reading the ids',
  );
  assert.deepEqual(confirmation.lists(), { ackedIds: ['a', 'b'], nackedIds: [], modifiedIds: [], lostIds: ['c'], invalidIds: ['d'] });
  assert.deepEqual(confirmation.invalidIds(), ['d']);
  assert.equal(decodeSubscribeResponse(Buffer.alloc(0)).confirmation, null);
  assert.equal(decodeSubscribeResponse(Buffer.alloc(0)).dropped, 0);

  // An EPHEMERAL delivery: no ack id.
  const [live] = decodeSubscribeResponse(
    methods.StreamingSubscribe.responseSerialize({ messages: [{ message: { id: '7', topic: 'sensors.hall.temp' }, deliveryAttempt: 1 }] }),
  ).messages;
  assert.equal(live.ackId, '');
  assert.equal(live._hasAckId, false);
  assert.equal(live.topic, 'sensors.hall.temp');
});

test('PublishStreamResponse: ids and duplicates, or a status', () => {
  const ok = decodePublishStreamResponse(
    publishStream.responseSerialize({
      requestId: 2 ** 40 + 1,
      messageIds: ['1-0', '1-1', '1-2'],
      duplicates: [false, true, true],
      deliverAt: [{ seconds: 1 }, { seconds: 2 }, { seconds: 3 }],
    }),
  );
  assert.deepEqual(ok, { requestId: 2 ** 40 + 1, status: null, messageIds: ['1-0', '1-1', '1-2'], duplicates: 2 });
  const failed = decodePublishStreamResponse(
    publishStream.responseSerialize({
      requestId: 7,
      status: { code: 3, message: 'topic: must match …', details: [{ typeUrl: 'type.googleapis.com/x', value: Buffer.from('z') }] },
    }),
  );
  assert.deepEqual(failed, { requestId: 7, status: { code: 3, message: 'topic: must match …' }, messageIds: [], duplicates: 0 });
});

test('unknown fields are skipped', () => {
  // Field 15 of each wire type in front of a known field.
  const unknown = Buffer.from([0x78, 0x96, 0x01, 0x79, 1, 2, 3, 4, 5, 6, 7, 8, 0x7a, 0x02, 0xaa, 0xbb, 0x7d, 1, 2, 3, 4]);
  const known = publishStream.responseSerialize({ requestId: 9, messageIds: ['a'] });
  assert.equal(decodePublishStreamResponse(Buffer.concat([unknown, known])).requestId, 9);
  assert.deepEqual(decodeSubscribeResponse(unknown).messages, []);
});
