// Topic kinds against a live redq: EPHEMERAL and LIST topics created and
// reported (kind, listKey), message.topic, subscribing with a pattern (and
// its argument errors), EPHEMERAL deliveries (no ack id: ack() and nack()
// send nothing, nothing waits for them), the subscription's dropped count,
// and publishing to and consuming a LIST topic. LIST topics consume lists
// under `legacy:jobs:`: the least-privilege user of the live server CI runs
// is granted those keys beside redq's own (.ci/run, docs/topic-kinds.md).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, Publisher, Subscriber, RedqError, status } from '../index.js';
import { serverAddress, unique, waitFor } from '../test-support/helpers.js';

let client;
let publisher;
before(async () => {
  client = connect(await serverAddress());
  await client.waitForReady(10_000);
  publisher = new Publisher(client);
});
after(async () => {
  await publisher.close();
  client.close();
});

/** The topic `name` as listTopics reports it. */
async function listed(admin, name) {
  let pageToken = '';
  for (;;) {
    const page = await admin.listTopics({ pageSize: 1000, pageToken });
    const found = page.topics.find((t) => t.name === name);
    if (found || !page.nextPageToken) return found;
    pageToken = page.nextPageToken;
  }
}

test('an EPHEMERAL topic reports its kind; a topic made by publishing is a STREAM topic', async () => {
  const name = `${unique('node-kinds')}.created`;
  const created = await client.admin.createTopic({ name, settings: { kind: 'TOPIC_KIND_EPHEMERAL' } });
  assert.equal(created.settings.kind, 'TOPIC_KIND_EPHEMERAL');
  assert.equal(created.settings.listKey, '');
  assert.equal((await client.admin.getTopic({ name })).settings.kind, 'TOPIC_KIND_EPHEMERAL');
  assert.equal((await listed(client.admin, name)).settings.kind, 'TOPIC_KIND_EPHEMERAL');
  const stream = unique('node-kinds-stream');
  await publisher.publish(stream, Buffer.from('x'));
  assert.equal((await client.admin.getTopic({ name: stream })).settings.kind, 'TOPIC_KIND_STREAM');
  // listKey on another kind: the server names the field.
  const err = await client.admin
    .createTopic({ name: unique('node-kinds'), settings: { kind: 'TOPIC_KIND_EPHEMERAL', listKey: 'legacy:jobs' } })
    .catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /list_key/);
  await client.admin.deleteTopic({ name });
});

test('a LIST topic reports its kind and list key', async () => {
  const name = unique('node-kinds-list');
  const listKey = `legacy:jobs:${unique('node')}`;
  const created = await client.admin.createTopic({ name, settings: { kind: 'TOPIC_KIND_LIST', listKey } });
  assert.deepEqual([created.settings.kind, created.settings.listKey], ['TOPIC_KIND_LIST', listKey]);
  const got = await client.admin.getTopic({ name });
  assert.deepEqual([got.settings.kind, got.settings.listKey], ['TOPIC_KIND_LIST', listKey]);
  const inList = await listed(client.admin, name);
  assert.deepEqual([inList.settings.kind, inList.settings.listKey], ['TOPIC_KIND_LIST', listKey]);
  const second = await client.admin
    .createTopic({ name: unique('node-kinds-list'), settings: { kind: 'TOPIC_KIND_LIST', listKey } })
    .catch((e) => e);
  assert.equal(second.code, status.FAILED_PRECONDITION, 'two LIST topics on one key');
  await client.admin.deleteTopic({ name });
});

test('a LIST topic published to with the default Publisher, and consumed', async () => {
  const name = unique('node-kinds-list');
  await client.admin.createTopic({ name, settings: { kind: 'TOPIC_KIND_LIST', listKey: `legacy:jobs:${unique('node')}` } });
  // Its automatic request dedupe id is refused by the LIST topic (a list
  // element is bytes only): it sends the request again without one.
  const own = new Publisher(client);
  const ids = await Promise.all(['job-1', 'job-2', 'job-3'].map((p) => own.publish(name, Buffer.from(p))));
  await own.close();
  assert.equal(new Set(ids).size, 3);
  assert.deepEqual([own.stats.failed, own.stats.published], [0, 3]);
  const subscriber = new Subscriber(client);
  const got = [];
  const sub = subscriber.subscribe(name, 'workers', (m) => {
    got.push(m);
  });
  await waitFor(() => got.length === 3, 10_000, '3 jobs');
  // Oldest first. A list element carries no id: a delivery's is the one redq gave it when it took it.
  assert.deepEqual(got.map((m) => [m.topic, m.payload.toString()]), [[name, 'job-1'], [name, 'job-2'], [name, 'job-3']]);
  assert.ok(got.every((m) => m.id !== '' && m.ackId !== ''));
  await subscriber.close();
  assert.deepEqual([sub.stats.ackRequested, sub.stats.acked], [3, 3], 'acked, and the server confirmed it');
  assert.equal(sub.dropped, 0);
});

test('STREAM messages carry their topic', async () => {
  const topic = unique('node-kinds-topic');
  const ids = [await publisher.publish(topic, Buffer.from('a')), await publisher.publish(topic, Buffer.from('b'))];
  const subscriber = new Subscriber(client);
  const got = [];
  const sub = subscriber.subscribe(topic, 's', (m) => {
    got.push({ id: m.id, topic: m.topic, ackId: m.ackId });
  });
  await waitFor(() => got.length === 2, 10_000, '2 messages');
  await subscriber.close();
  assert.deepEqual(got.map((m) => [m.id, m.topic]), [[ids[0], topic], [ids[1], topic]]);
  assert.ok(got.every((m) => m.ackId !== ''));
  assert.equal(sub.stats.ackRequested, 2);
  assert.equal(sub.dropped, 0);
  assert.equal(sub.pattern, '');
});

test('a topic or a pattern: both, or neither, is a TypeError before anything is sent', async () => {
  const subscriber = new Subscriber(client);
  const handler = () => {};
  for (const [topic, pattern] of [['t', 'sensors.>'], [null, undefined], ['', ''], [undefined, '']]) {
    assert.throws(() => subscriber.subscribe(topic, 's', handler, { pattern }), (err) => err instanceof TypeError && /pattern/.test(err.message));
  }
  // A pattern the server cannot parse: refused, naming the field.
  const sub = subscriber.subscribe(null, 's', handler, { pattern: 'sensors.>.temp' });
  const err = await sub.opened.catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /pattern/);
  await subscriber.close();
});

test('a pattern stream gets the messages of the matching EPHEMERAL topics, without ack ids', async () => {
  const family = unique('node-kinds');
  const [kitchen, hall, humidity] = [`${family}.kitchen.temp`, `${family}.hall.temp`, `${family}.kitchen.humidity`];
  for (const name of [kitchen, hall, humidity]) await client.admin.createTopic({ name, settings: { kind: 'TOPIC_KIND_EPHEMERAL' } });
  const subscriber = new Subscriber(client);
  const got = [];
  const sub = subscriber.subscribe(
    null,
    'dashboard',
    (m) => {
      got.push(m);
      // Nothing to settle: no request, no error, no room taken in the window.
      if (got.length % 2) m.ack();
      else m.nack(0);
    },
    { pattern: `${family}.*.temp`, maxOutstanding: 2 },
  );
  await sub.opened; // the server's Redis subscription is in place: every later message comes
  assert.equal(sub.topic, '');
  assert.equal(sub.pattern, `${family}.*.temp`);
  const skipped = await publisher.publish(humidity, Buffer.from('55%'));
  const first = await publisher.publish(kitchen, Buffer.from('21.5'));
  const second = await publisher.publish(hall, Buffer.from('19.0'));
  // Published last to a matching topic: once it is in, the one before it would be too.
  const last = await publisher.publish(kitchen, Buffer.from('21.6'));
  await waitFor(() => got.length === 3, 10_000, '3 messages');
  assert.deepEqual(
    got.map((m) => [m.id, m.topic, m.payload.toString()]),
    [[first, kitchen, '21.5'], [second, hall, '19.0'], [last, kitchen, '21.6']],
  );
  assert.ok(!got.some((m) => m.id === skipped));
  assert.deepEqual(got.map((m) => m.ackId), ['', '', '']);
  assert.deepEqual(got.map((m) => m.deliveryAttempt), [1, 1, 1]);
  assert.ok(got.every((m) => m.settled));
  got[0].ack(); // again: still nothing
  assert.deepEqual(await sub.flush(), { ackedIds: [], nackedIds: [], modifiedIds: [], lostIds: [], invalidIds: [] });
  await subscriber.close();
  assert.equal(sub.dropped, 0);
  assert.deepEqual([sub.stats.ackRequested, sub.stats.nackRequested, sub.stats.extendRequested], [0, 0, 0]);
});

test('EPHEMERAL deliveries are waited for by nothing: maxOutstanding 1, every handler still running', async () => {
  const topic = `${unique('node-kinds')}.live`;
  await client.admin.createTopic({ name: topic, settings: { kind: 'TOPIC_KIND_EPHEMERAL' } });
  const subscriber = new Subscriber(client);
  const got = [];
  const finish = [];
  const sub = subscriber.subscribe(
    topic,
    'live',
    (m) => {
      got.push([m.topic, m.payload.toString()]);
      return new Promise((resolve) => finish.push(resolve));
    },
    { maxOutstanding: 1, concurrency: 10 },
  );
  await sub.opened;
  for (const payload of ['a', 'b', 'c']) await publisher.publish(topic, Buffer.from(payload));
  await waitFor(() => got.length === 3, 10_000, '3 messages');
  assert.deepEqual(got, [[topic, 'a'], [topic, 'b'], [topic, 'c']]);
  for (const resolve of finish) resolve();
  await subscriber.close();
  assert.deepEqual([sub.stats.ackRequested, sub.stats.extendRequested], [0, 0]);
});
