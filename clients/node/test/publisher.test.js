// Publisher against a live redq: ids, batching under concurrency, errors of
// one request, dedupe when a broken stream forces a resend, flush and close.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, Publisher, RedqError, status } from '../index.js';
import { serverAddress, startProxy, unique, waitFor } from '../test-support/helpers.js';

let address;
let client;
before(async () => {
  address = await serverAddress();
  client = connect(address);
  await client.waitForReady(10_000);
});
after(() => client.close());

const topicStats = async (topic) => (await client.admin.getTopic({ name: topic })).stats;

test('publish returns the message ids, in order', async () => {
  const topic = unique('node-pub-ids');
  const publisher = new Publisher(client);
  const ids = await Promise.all(['a', 'b', 'c'].map((p, i) => publisher.publish(topic, p, { attributes: { i: String(i) } })));
  assert.equal(new Set(ids).size, 3);
  const [ms0, seq0] = ids[0].split('-').map(Number);
  const [ms2, seq2] = ids[2].split('-').map(Number);
  assert.ok(ms2 > ms0 || (ms2 === ms0 && seq2 > seq0), `ids in publish order: ${ids}`);
  assert.equal((await topicStats(topic)).streamLength, 3);
  await publisher.close();
});

test('many publishes at once go out in few requests', async () => {
  const topic = unique('node-pub-batch');
  const publisher = new Publisher(client);
  const ids = await Promise.all(Array.from({ length: 2500 }, (_, i) => publisher.publish(topic, `m${i}`)));
  assert.equal(new Set(ids).size, 2500);
  // 1000 messages per request at most: 3 requests, sent in one pass.
  assert.equal(publisher.stats.requests, 3);
  assert.equal((await topicStats(topic)).streamLength, 2500);
  await publisher.close();
});

test('50 publishers awaiting one publish at a time share requests', async () => {
  const topic = unique('node-pub-concurrent');
  const publisher = new Publisher(client);
  let sent = 0;
  const worker = async () => {
    while (sent < 2000) {
      sent++;
      await publisher.publish(topic, 'x');
    }
  };
  await Promise.all(Array.from({ length: 50 }, worker));
  assert.equal(publisher.stats.published, 2000);
  assert.ok(publisher.stats.requests <= 2000 / 5, `${publisher.stats.requests} requests for 2000 messages`);
  await publisher.close();
});

test('a bad request fails only its own messages', async () => {
  const topic = unique('node-pub-err');
  const publisher = new Publisher(client);
  const results = await Promise.allSettled([
    publisher.publish(topic, 'good-1'),
    publisher.publish('not a topic!', 'bad'),
    publisher.publish(topic, 'good-2'),
  ]);
  assert.equal(results[0].status, 'fulfilled');
  assert.equal(results[2].status, 'fulfilled');
  assert.equal(results[1].status, 'rejected');
  const err = results[1].reason;
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /^topic: /);
  // The stream goes on.
  assert.match(await publisher.publish(topic, 'after'), /\S/);
  assert.equal(publisher.stats.streams, 1);
  await publisher.close();
});

test('the same dedupe id is published once', async () => {
  const topic = unique('node-pub-dedupe');
  const publisher = new Publisher(client);
  const first = await publisher.publish(topic, 'x', { dedupeId: 'order-42' });
  const again = await publisher.publish(topic, 'x', { dedupeId: 'order-42' });
  assert.equal(again, first);
  assert.equal(publisher.stats.duplicates, 1);
  assert.equal((await topicStats(topic)).streamLength, 1);
  await publisher.close();
});

test('a broken stream is reopened and resent without duplicates', async () => {
  const topic = unique('node-pub-retry');
  const proxy = await startProxy(address);
  const publisher = new Publisher(proxy.address, { initialBackoff: 20 });
  await publisher.publish(topic, 'warm-up'); // the connection is up
  // The server's answers stop at the proxy: published, but unanswered...
  proxy.hold();
  const pending = Array.from({ length: 100 }, (_, i) => publisher.publish(topic, `m${i}`));
  await waitFor(async () => (await topicStats(topic)).streamLength === 101, 10_000, 'the server to publish 100');
  // ...until the connection breaks: the publisher reconnects and resends.
  proxy.cut();
  const ids = await Promise.all(pending);
  assert.equal(new Set(ids).size, 100);
  assert.ok(publisher.stats.streams >= 2, `streams: ${publisher.stats.streams}`);
  assert.ok(publisher.stats.retries >= 1, `retries: ${publisher.stats.retries}`);
  assert.equal(publisher.stats.duplicates, 100, 'every resent message was recognised');
  assert.equal((await topicStats(topic)).streamLength, 101, 'nothing published twice');
  await publisher.close();
  await proxy.close();
});

test('flush waits for what was published; close refuses more', async () => {
  const topic = unique('node-pub-flush');
  const publisher = new Publisher(client, { linger: 50 });
  let settled = 0;
  for (let i = 0; i < 10; i++) publisher.publish(topic, `m${i}`).then(() => settled++);
  await publisher.flush();
  await null; // the then() callbacks above run after flush's own
  assert.equal(settled, 10);
  assert.equal(publisher.stats.requests, 1, 'the linger gathered one request');
  const scheduled = publisher.publish(topic, 'later', { delay: 60_000 });
  await publisher.close();
  assert.match(await scheduled, /\S/, 'close flushed it');
  assert.equal((await topicStats(topic)).scheduledCount, 1);
  const err = await publisher.publish(topic, 'too late').catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.FAILED_PRECONDITION);
});

test('publish checks its arguments', async () => {
  const publisher = new Publisher(client);
  await assert.rejects(publisher.publish('t', 42), /payload/);
  await assert.rejects(publisher.publish(7, 'x'), /topic/);
  await assert.rejects(publisher.publish('t', 'x', { delay: 1, deliverAt: Date.now() }), /not both/);
  await publisher.close();
});
