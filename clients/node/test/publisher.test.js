// Publisher against a live redq: ids, batching under concurrency, errors of
// one request, dedupe when a broken stream forces a resend, flush and close;
// and against servers that never answer: the publish timeout and close's.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, Publisher, RedqError, status } from '../index.js';
import { serverAddress, settled, startProxy, startSilentServer, unique, waitFor } from '../test-support/helpers.js';

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
  const ids = await Promise.all(['a', 'b', 'c'].map((p, i) => publisher.publish(topic, Buffer.from(p), { attributes: { i: String(i) } })));
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
  const ids = await Promise.all(Array.from({ length: 2500 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
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
      await publisher.publish(topic, Buffer.from('x'));
    }
  };
  await Promise.all(Array.from({ length: 50 }, worker));
  assert.equal(publisher.stats.submitted, 2000);
  assert.equal(publisher.stats.published, 2000);
  assert.ok(publisher.stats.requests <= 2000 / 5, `${publisher.stats.requests} requests for 2000 messages`);
  await publisher.close();
});

test('a bad request fails only its own messages', async () => {
  const topic = unique('node-pub-err');
  const publisher = new Publisher(client);
  const results = await Promise.allSettled([
    publisher.publish(topic, Buffer.from('good-1')),
    publisher.publish('not a topic!', Buffer.from('bad')),
    publisher.publish(topic, Buffer.from('good-2')),
  ]);
  assert.equal(results[0].status, 'fulfilled');
  assert.equal(results[2].status, 'fulfilled');
  assert.equal(results[1].status, 'rejected');
  const err = results[1].reason;
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /^topic: /);
  // The stream goes on.
  assert.match(await publisher.publish(topic, Buffer.from('after')), /\S/);
  assert.equal(publisher.stats.streams, 1);
  await publisher.close();
});

test('the same dedupe id is published once', async () => {
  const topic = unique('node-pub-dedupe');
  const publisher = new Publisher(client);
  const first = await publisher.publish(topic, Buffer.from('x'), { dedupeId: 'order-42' });
  const again = await publisher.publish(topic, Buffer.from('x'), { dedupeId: 'order-42' });
  assert.equal(again, first);
  assert.equal(publisher.stats.duplicates, 1);
  assert.equal((await topicStats(topic)).streamLength, 1);
  await publisher.close();
});

test('a broken stream is reopened and resent without duplicates', async () => {
  const topic = unique('node-pub-retry');
  const proxy = await startProxy(address);
  const publisher = new Publisher(proxy.address, { initialBackoff: 20 });
  await publisher.publish(topic, Buffer.from('warm-up')); // the connection is up
  // The server's answers stop at the proxy: published, but unanswered...
  proxy.hold();
  const pending = Array.from({ length: 100 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`)));
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
  for (let i = 0; i < 10; i++) publisher.publish(topic, Buffer.from(`m${i}`)).then(() => settled++);
  await publisher.flush();
  await null; // the then() callbacks above run after flush's own
  assert.equal(settled, 10);
  assert.equal(publisher.stats.requests, 1, 'the linger gathered one request');
  const scheduled = publisher.publish(topic, Buffer.from('later'), { delay: 60_000 });
  await publisher.close();
  assert.match(await scheduled, /\S/, 'close flushed it');
  assert.equal((await topicStats(topic)).scheduledCount, 1);
  const err = await publisher.publish(topic, Buffer.from('too late')).catch((e) => e);
  assert.ok(err instanceof RedqError);
  assert.equal(err.code, status.FAILED_PRECONDITION);
});

test('publish checks its arguments', async () => {
  const publisher = new Publisher(client);
  await assert.rejects(publisher.publish(7, Buffer.from('x')), /topic/);
  await assert.rejects(publisher.publish('t', Buffer.from('x'), { delay: 1, deliverAt: Date.now() }), /not both/);
  await publisher.close();
});

test('payloads are bytes: a number, an object or a string is a TypeError', async () => {
  const topic = unique('node-pub-payload');
  const publisher = new Publisher(client);
  for (const payload of [5, { a: 1 }, 'text', null, undefined, [1, 2]]) {
    const err = await publisher.publish(topic, payload).catch((e) => e);
    assert.ok(err instanceof TypeError, `publish(topic, ${JSON.stringify(payload)}) refused: ${err}`);
    assert.match(err.message, /^payload: must be a Buffer or a Uint8Array/);
    const scheduled = await client.schedule(topic, payload, { delay: 60_000 }).catch((e) => e);
    assert.ok(scheduled instanceof TypeError, `schedule(topic, ${JSON.stringify(payload)}) refused: ${scheduled}`);
  }
  assert.match((await publisher.publish(topic, 'text').catch((e) => e)).message, /Buffer\.from\(text\)/, 'says how to send text');
  await publisher.publish(topic, Buffer.from('a Buffer'));
  await publisher.publish(topic, new Uint8Array([1, 2, 3]));
  assert.equal((await topicStats(topic)).streamLength, 2, 'only the bytes were published');
  assert.equal(publisher.stats.submitted, 2, 'the refused calls are not counted');
  await publisher.close();
});

test('stats: a publish the server refuses is counted as failed, not published', async () => {
  const topic = unique('node-pub-stats');
  const publisher = new Publisher(client);
  await publisher.publish(topic, Buffer.from('good'));
  await publisher.publish('not a topic!', Buffer.from('bad')).catch(() => {});
  assert.deepEqual(
    { submitted: publisher.stats.submitted, published: publisher.stats.published, failed: publisher.stats.failed },
    { submitted: 2, published: 1, failed: 1 },
  );
  await publisher.close();
});

for (const kind of ['tcp', 'http2']) {
  test(`a server that never answers (${kind}): publish() rejects with DEADLINE_EXCEEDED, close() settles`, async () => {
    const silent = await startSilentServer(kind);
    const publisher = new Publisher(silent.address, { timeout: 300 });
    try {
      const first = await settled(publisher.publish('t', Buffer.from('x')), 10_000, 'publish');
      assert.ok(first.error instanceof RedqError, `rejected with a RedqError: ${first.error}`);
      assert.equal(first.error.code, status.DEADLINE_EXCEEDED);
      assert.equal(publisher.stats.published, 0);
      assert.equal(publisher.stats.failed, 1);

      // close() waits at most its own timeout, then fails what still waits.
      const second = publisher.publish('t', Buffer.from('y'));
      const closed = await settled(publisher.close({ timeout: 200 }), 10_000, 'close');
      assert.equal(closed.error, undefined, 'close() resolved');
      const late = await settled(second, 1_000, 'the publish waiting at close');
      assert.equal(late.error?.code, status.DEADLINE_EXCEEDED);
      assert.deepEqual([publisher.stats.submitted, publisher.stats.published, publisher.stats.failed], [2, 0, 2]);
    } finally {
      await silent.close();
    }
  });
}

test('the publish timeout spares what the server answers in time; close() takes only a timeout', async () => {
  const publisher = new Publisher(client, { timeout: 60_000 });
  assert.equal(publisher.timeout, 60_000);
  assert.equal(new Publisher(client).timeout, 60_000, 'the default, as Pub/Sub');
  const topic = unique('node-pub-timeout');
  assert.match(await publisher.publish(topic, Buffer.from('x')), /\S/);
  await assert.rejects(publisher.close({ timout: 5 }), /close options: unknown option 'timout' \(known: timeout\)/);
  await assert.rejects(publisher.close({ timeout: -1 }), /timeout: must be a number of milliseconds/);
  await publisher.close({ timeout: 5_000 });
});
