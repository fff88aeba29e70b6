// Subscriber against a live redq: messages published with the library and
// received with it, implicit and explicit acks and nacks, redelivery, lease
// extension, concurrency, graceful close, reconnecting, a refused stream
// (reported once), the `opened` signal, flush() waiting for the server's
// confirmation of acks already written, and the confirmed counts.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, Publisher, Subscriber, RedqError, status } from '../index.js';
import { serverAddress, startProxy, unique, waitFor } from '../test-support/helpers.js';

let address;
let client;
let publisher;
before(async () => {
  address = await serverAddress();
  client = connect(address);
  await client.waitForReady(10_000);
  publisher = new Publisher(client);
});
after(async () => {
  await publisher.close();
  client.close();
});

const subscriptionStats = async (topic, name) => (await client.admin.getSubscription({ topic, name })).stats;
// Retries after 50 ms instead of the server's default second.
const FAST_RETRY = { retryPolicy: { minimumBackoff: 50, maximumBackoff: 200 } };

test('messages arrive with their id, payload and attributes; returning acks', async () => {
  const topic = unique('node-sub-basic');
  const published = [];
  for (let i = 0; i < 3; i++) {
    published.push(await publisher.publish(topic, Buffer.from(`payload-${i}`), { attributes: { i: String(i) }, orderingKey: 'k' }));
  }
  const subscriber = new Subscriber(client);
  const received = [];
  subscriber.subscribe(topic, 'basic', (m) => {
    received.push({ id: m.id, payload: m.payload.toString(), attributes: m.attributes, orderingKey: m.orderingKey, attempt: m.deliveryAttempt, publishTime: m.publishTime, deliverAt: m.deliverAt });
  });
  await waitFor(() => received.length === 3, 10_000, '3 messages');
  await subscriber.close();
  assert.deepEqual(received.map((r) => r.id), published);
  received.forEach((r, i) => {
    assert.equal(r.payload, `payload-${i}`);
    assert.deepEqual(r.attributes, { i: String(i) });
    assert.equal(r.orderingKey, 'k');
    assert.equal(r.attempt, 1);
    assert.ok(r.publishTime instanceof Date && Math.abs(r.publishTime - Date.now()) < 60_000);
    assert.equal(r.deliverAt.getTime(), r.publishTime.getTime());
  });
  const stats = await subscriptionStats(topic, 'basic');
  assert.equal(stats.ackedCount, 3, 'acked by the time close() resolved');
  assert.equal(stats.pending, 0);
});

test('messageOrdering: one message of a key at a time, in order, beside other keys', async () => {
  const topic = unique('node-sub-ordered');
  const ids = [];
  for (let i = 0; i < 3; i++) {
    ids.push(await publisher.publish(topic, Buffer.from(`a-${i}`), { orderingKey: 'a' }));
    await publisher.publish(topic, Buffer.from(`b-${i}`), { orderingKey: 'b' });
  }
  const subscriber = new Subscriber(client);
  const running = new Map();
  const order = [];
  let overlaps = 0;
  subscriber.subscribe(topic, 'ordered', async (m) => {
    if (running.get(m.orderingKey)) overlaps++;
    running.set(m.orderingKey, true);
    if (m.orderingKey === 'a') order.push(m.id);
    await sleep(50);
    running.set(m.orderingKey, false);
  }, { messageOrdering: true, concurrency: 10 });
  await waitFor(() => order.length === 3, 10_000, "key a's 3 messages");
  await subscriber.close();
  assert.equal(overlaps, 0, 'no two handlers of one key at once');
  assert.deepEqual(order, ids);
  const info = await client.admin.getSubscription({ topic, name: 'ordered' });
  assert.equal(info.settings.messageOrdering, true);
});

test('nack(0) redelivers at once with delivery attempt 2', async () => {
  const topic = unique('node-sub-nack');
  const id = await publisher.publish(topic, Buffer.from('again'));
  const subscriber = new Subscriber(client);
  const attempts = [];
  const sub = subscriber.subscribe(topic, 'nack', (m) => {
    attempts.push(m.deliveryAttempt);
    if (m.deliveryAttempt === 1) m.nack(0);
    else assert.equal(m.id, id);
  });
  await waitFor(() => attempts.length === 2, 10_000, 'the redelivery');
  await subscriber.close();
  assert.deepEqual(attempts, [1, 2]);
  assert.equal(sub.stats.nackRequested, 1);
  assert.equal(sub.stats.ackRequested, 1);
  assert.equal(sub.stats.nacked, 1, 'the nack confirmed');
  assert.equal(sub.stats.acked, 1, 'the ack confirmed');
  assert.equal((await subscriptionStats(topic, 'nack')).ackedCount, 1);
});

test('a handler that throws, or rejects, nacks (redelivered after the retry backoff)', async () => {
  const topic = unique('node-sub-throw');
  await publisher.publish(topic, Buffer.from('sync'));
  await publisher.publish(topic, Buffer.from('async'));
  const subscriber = new Subscriber(client);
  const seen = [];
  const errors = [];
  subscriber.subscribe(
    topic,
    'throw',
    async (m) => {
      seen.push(`${m.payload}:${m.deliveryAttempt}`);
      if (m.deliveryAttempt > 1) return;
      if (m.payload.toString() === 'async') {
        await sleep(1);
        throw new Error('async failure');
      }
      throw new Error('sync failure');
    },
    { ...FAST_RETRY, onError: (err, m) => errors.push(`${err.message} ${m?.payload}`) },
  );
  await waitFor(() => seen.length === 4, 10_000, 'both redelivered');
  await subscriber.close();
  assert.deepEqual(seen.sort(), ['async:1', 'async:2', 'sync:1', 'sync:2']);
  assert.deepEqual(errors.sort(), ['async failure async', 'sync failure sync']);
  assert.equal((await subscriptionStats(topic, 'throw')).ackedCount, 2);
});

test('a sync throw in a plain (not async) handler nacks too', async () => {
  const topic = unique('node-sub-throw-sync');
  await publisher.publish(topic, Buffer.from('x'));
  const subscriber = new Subscriber(client);
  const attempts = [];
  subscriber.subscribe(
    topic,
    'throw',
    (m) => {
      attempts.push(m.deliveryAttempt);
      if (m.deliveryAttempt === 1) throw new Error('no');
    },
    FAST_RETRY,
  );
  await waitFor(() => attempts.length === 2, 10_000, 'the redelivery');
  await subscriber.close();
  assert.deepEqual(attempts, [1, 2]);
});

test('the lease is extended while a slow handler runs', async () => {
  const topic = unique('node-sub-lease');
  await publisher.publish(topic, Buffer.from('slow'));
  const subscriber = new Subscriber(client);
  const deliveries = [];
  let confirmation = null;
  const sub = subscriber.subscribe(
    topic,
    'lease',
    async (m) => {
      deliveries.push(m.deliveryAttempt);
      await sleep(2_500); // 2.5 ack deadlines
      m.ack();
      confirmation = await sub.flush();
      return m.ackId;
    },
    { ackDeadline: 1_000, ...FAST_RETRY },
  );
  await waitFor(() => confirmation !== null, 15_000, 'the slow handler');
  await subscriber.close();
  assert.deepEqual(deliveries, [1], 'not redelivered while the handler ran');
  assert.equal(confirmation.ackedIds.length, 1, `the ack applied (lost: ${confirmation.lostIds})`);
  assert.ok(sub.stats.extended >= 2, `extended ${sub.stats.extended} times (confirmed), of ${sub.stats.extendRequested}`);
});

test('concurrency bounds the handlers running at once', async () => {
  const topic = unique('node-sub-conc');
  await Promise.all(Array.from({ length: 20 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const subscriber = new Subscriber(client);
  let running = 0;
  let most = 0;
  let done = 0;
  subscriber.subscribe(
    topic,
    'conc',
    async () => {
      most = Math.max(most, ++running);
      await sleep(5);
      running--;
      done++;
    },
    { concurrency: 3, maxOutstanding: 10 },
  );
  await waitFor(() => done === 20, 10_000, '20 handled');
  await subscriber.close();
  assert.equal(most, 3);
});

test('close waits for running handlers, acks them, and gives back the rest', async () => {
  const topic = unique('node-sub-close');
  await Promise.all(Array.from({ length: 10 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const subscriber = new Subscriber(client);
  let started = 0;
  let finished = 0;
  const sub = subscriber.subscribe(
    topic,
    'close',
    async () => {
      started++;
      await sleep(300);
      finished++;
    },
    // A short deadline: see below.
    { concurrency: 4, ackDeadline: 1_000, ...FAST_RETRY },
  );
  await waitFor(() => started === 4 && sub.stats.received === 10, 10_000, '4 handlers running, 10 received');
  await subscriber.close();
  assert.equal(finished, 4, 'close waited for the running handlers');
  assert.equal(started, 4, 'no handler started after close');
  assert.equal(sub.stats.nackRequested, 6, 'the 6 waiting were given back');
  assert.equal(sub.stats.nacked, 6, 'and the server confirmed it');
  assert.equal((await subscriptionStats(topic, 'close')).ackedCount, 4, 'the acks applied before close resolved');

  // The 6 given back go to the next stream. (One of them may come only after
  // the 1 s ack deadline: the server can hand a last delivery to the closing
  // stream, after applying its final requests, that it never sends.)
  const rest = [];
  const next = new Subscriber(client);
  next.subscribe(topic, 'close', (m) => rest.push(m.deliveryAttempt));
  await waitFor(() => rest.length === 6, 10_000, 'the 6 given back');
  await next.close();
  assert.ok(rest.every((attempt) => attempt >= 2), `attempts ${rest}`);
});

test('acks linger while the stream holds under half its window, go at once past it, and on close', async () => {
  const topic = unique('node-sub-linger');
  const subscriber = new Subscriber(client);
  const LINGER = 3_000;
  let handled = 0;
  const sub = subscriber.subscribe(topic, 'linger', () => {
    handled++;
  }, { maxOutstanding: 10, ackLinger: LINGER });
  const acked = async () => (await subscriptionStats(topic, 'linger')).ackedCount;

  // One message: 1 of 10 held, its ack waits for more.
  await publisher.publish(topic, Buffer.from('first'));
  await waitFor(() => handled === 1, 10_000, 'the first message');
  const handledAt = performance.now();
  await sleep(500);
  assert.equal(await acked(), 0, 'the ack lingers');
  await waitFor(async () => (await acked()) === 1, 10_000, 'the lingering ack');
  assert.ok(performance.now() - handledAt >= LINGER - 100, 'sent after the linger, not before');

  // Five at once: half the window held, their acks go at once.
  await Promise.all(Array.from({ length: 5 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const publishedAt = performance.now();
  await waitFor(async () => (await acked()) === 6, 10_000, 'the acks of a half-full window');
  assert.ok(performance.now() - publishedAt < LINGER - 500, 'without lingering');

  // close() sends a lingering ack at once.
  await publisher.publish(topic, Buffer.from('last'));
  await waitFor(() => handled === 7, 10_000, 'the last message');
  const closing = performance.now();
  await subscriber.close();
  assert.ok(performance.now() - closing < LINGER - 500, 'close did not wait for the linger');
  assert.equal(await acked(), 7);
  assert.equal(sub.stats.ackRequested, 7);
});

test('a response of more than half the window is handled in halves, the first half acked before the second starts', async () => {
  const topic = unique('node-sub-halves');
  await client.admin.createTopic({ name: topic });
  await client.admin.createSubscription({ topic, name: 'halves' });
  await Promise.all(Array.from({ length: 10 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const subscriber = new Subscriber(client);
  const seen = []; // the requests written when each handler started
  let sub;
  sub = subscriber.subscribe(topic, 'halves', () => {
    seen.push(sub.stats.requests);
  }, { maxOutstanding: 10 });
  await waitFor(() => seen.length === 10, 10_000, 'the backlog');
  assert.equal(sub.stats.responses, 1, 'the backlog came in one response');
  const [first, second] = [seen.slice(0, 5), seen.slice(5)];
  assert.deepEqual(new Set(first).size, 1, 'the first half ran in one go');
  assert.ok(second[0] > first[4], `the first half's acks were written before the second half started: ${seen}`);
  await waitFor(async () => (await subscriptionStats(topic, 'halves')).ackedCount === 10, 10_000, 'all acked');
  await subscriber.close();
});

test('confirmAcks: every request asks for a confirmation, at full speed too, and the stats count every ack', async () => {
  const topic = unique('node-sub-confirm-all');
  await client.admin.createTopic({ name: topic });
  await client.admin.createSubscription({ topic, name: 'all' });
  await Promise.all(Array.from({ length: 10 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const subscriber = new Subscriber(client);
  let handled = 0;
  const sub = subscriber.subscribe(topic, 'all', () => {
    handled++;
  }, { maxOutstanding: 10, confirmAcks: true });
  await waitFor(() => handled === 10, 10_000, 'the backlog');
  await sub.flush();
  assert.deepEqual([sub.stats.ackRequested, sub.stats.acked, sub.stats.lost], [10, 10, 0]);
  await subscriber.close();
});

test('ordered: a late ack is reported lost, and the stream goes on', async () => {
  const topic = unique('node-sub-ordered-late');
  await publisher.publish(topic, Buffer.from('late'), { orderingKey: 'k' });
  const subscriber = new Subscriber(client);
  let first = null;
  let release;
  const held = new Promise((resolve) => (release = resolve));
  const got = [];
  const sub = subscriber.subscribe(topic, 'late', (m) => {
    got.push(`${m.payload}:${m.deliveryAttempt}`);
    if (m.payload.toString() === 'late' && m.deliveryAttempt === 1) {
      first = m;
      return held; // its lease (1 s, not extended) runs out and it is redelivered
    }
    return undefined;
  }, { messageOrdering: true, maxOutstanding: 2, ackDeadline: 1_000, maxExtension: 0, ...FAST_RETRY });
  await waitFor(() => got.includes('late:2'), 10_000, 'the redelivery');
  first.ack(); // too late; the stream holds half its window, where acks go at full speed
  await waitFor(() => sub.stats.lost === 1, 10_000, 'the late ack reported lost');
  release();
  await publisher.publish(topic, Buffer.from('after'), { orderingKey: 'k' });
  await waitFor(() => got.includes('after:1'), 10_000, 'a message after the late ack');
  assert.equal(sub.stats.streams, 1, 'the stream did not end');
  await subscriber.close();
});

test('a broken stream is reopened and delivery goes on', async () => {
  const topic = unique('node-sub-reconnect');
  const proxy = await startProxy(address);
  const subscriber = new Subscriber(proxy.address, { initialBackoff: 20 });
  const got = [];
  const errors = [];
  const sub = subscriber.subscribe(topic, 'reconnect', (m) => got.push(m.payload.toString()), {
    onError: (err) => errors.push(err.code),
  });
  await publisher.publish(topic, Buffer.from('before'));
  await waitFor(() => got.length === 1, 10_000, 'the first message');
  proxy.cut();
  await waitFor(() => sub.stats.streams >= 2, 10_000, 'a new stream');
  await publisher.publish(topic, Buffer.from('after'));
  await waitFor(() => got.includes('after'), 10_000, 'the message published after the break');
  await subscriber.close();
  await proxy.close();
  assert.ok(errors.includes(status.UNAVAILABLE), `errors: ${errors}`);
});

test('a refused subscription stops with the error, reported once: opened and closed reject, onError is not told', async () => {
  const subscriber = new Subscriber(client);
  const errors = [];
  const sub = subscriber.subscribe('not a topic!', 'x', () => {}, { onError: (err) => errors.push(err) });
  const err = await sub.closed.then(() => 'closed', (e) => e);
  assert.ok(err instanceof RedqError, `closed rejected: ${err}`);
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /topic/);
  await subscriber.close();
  assert.deepEqual(errors.map(String), [], 'onError is not told of a refusal');
  assert.ok(sub.opened instanceof Promise);
  assert.equal(await sub.opened.then(() => 'opened', (e) => e), err, 'opened rejects with the same error');
  assert.equal(sub.stats.streams, 1, 'not retried');
});

test('opened resolves once the server has set the subscription up', async () => {
  const topic = unique('node-sub-opened');
  const subscriber = new Subscriber(client);
  const errors = [];
  const sub = subscriber.subscribe(topic, 'opened', () => {}, { onError: (err) => errors.push(err) });
  assert.ok(sub.opened instanceof Promise);
  await sub.opened;
  // The subscription (and its topic) exist by then: the server sends the
  // stream's headers after creating them.
  const info = await client.admin.getSubscription({ topic, name: 'opened' });
  assert.equal(info.name, 'opened');
  await subscriber.close();
  assert.deepEqual(errors, []);

  const early = new Subscriber(client).subscribe(unique('node-sub-never'), 'x', () => {});
  await early.close(); // before the server could answer
  const cancelled = await early.opened.then(() => null, (e) => e);
  assert.ok(cancelled === null || cancelled.code === status.CANCELLED, `opened settled: ${cancelled}`);
});

test('flush() waits for the confirmation of acks the linger already wrote, and returns their ids', async () => {
  const topic = unique('node-sub-flush');
  const proxy = await startProxy(address);
  const subscriber = new Subscriber(proxy.address);
  let ackId = null;
  const sub = subscriber.subscribe(topic, 'flush', (m) => {
    // From here on the server's answers (the ack's confirmation among them)
    // stop at the proxy; the ack itself goes through.
    proxy.hold();
    ackId = m.ackId;
  }, { ackLinger: 50 });
  await sub.opened;
  await publisher.publish(topic, Buffer.from('x'));
  await waitFor(() => ackId !== null, 10_000, 'the message');
  // The linger wrote the ack and the server applied it: not waiting in the library any more.
  await waitFor(async () => (await subscriptionStats(topic, 'flush')).ackedCount === 1, 10_000, 'the ack applied');
  let done = false;
  const flushing = sub.flush().then((c) => {
    done = true;
    return c;
  });
  await sleep(300);
  assert.equal(done, false, 'flush() waits for the confirmation held at the proxy');
  proxy.release();
  const confirmation = await flushing;
  assert.deepEqual(confirmation.ackedIds, [ackId]);
  assert.deepEqual([confirmation.nackedIds, confirmation.lostIds, confirmation.invalidIds], [[], [], []]);
  assert.equal(sub.stats.acked, 1);
  assert.equal((await subscriptionStats(topic, 'flush')).pending, 0);
  await subscriber.close();
  await proxy.close();
});

test('flush() also waits for acks sent at full speed without asking for a confirmation', async () => {
  const topic = unique('node-sub-flush-fast');
  await client.admin.createTopic({ name: topic });
  await client.admin.createSubscription({ topic, name: 'fast' });
  await Promise.all(Array.from({ length: 10 }, (_, i) => publisher.publish(topic, Buffer.from(`m${i}`))));
  const proxy = await startProxy(address);
  const subscriber = new Subscriber(proxy.address);
  let handled = 0;
  const sub = subscriber.subscribe(topic, 'fast', () => {
    if (++handled === 10) proxy.hold(); // the server's answers stop at the proxy from here on
  }, { maxOutstanding: 10 }); // the backlog fills the window: its acks go at once, without confirm
  await waitFor(() => handled === 10, 10_000, 'the backlog');
  await waitFor(async () => (await subscriptionStats(topic, 'fast')).ackedCount === 10, 10_000, 'the acks applied');
  let done = false;
  const flushing = sub.flush().then(() => {
    done = true;
  });
  await sleep(300);
  assert.equal(done, false, 'flush() waits for the server to say those acks are applied');
  proxy.release();
  await flushing;
  assert.equal(sub.stats.ackRequested, 10);
  await subscriber.close();
  await proxy.close();
});

test('flush() sends lingering acks at once and returns them; with nothing waiting it resolves at once', async () => {
  const topic = unique('node-sub-flush-now');
  await Promise.all(['a', 'b'].map((p) => publisher.publish(topic, Buffer.from(p))));
  const subscriber = new Subscriber(client);
  const seen = [];
  const sub = subscriber.subscribe(topic, 'flush', (m) => {
    seen.push(m);
  }, { ackLinger: 60_000, ...FAST_RETRY });
  await waitFor(() => seen.length === 2, 10_000, 'both messages');
  const first = await sub.flush(); // the handlers' acks linger (60 s): flush sends them now
  assert.deepEqual(first.ackedIds.sort(), seen.map((m) => m.ackId).sort());
  assert.deepEqual(await sub.flush(), { ackedIds: [], nackedIds: [], modifiedIds: [], lostIds: [], invalidIds: [] });
  await subscriber.close();
});

test('stats: acked counts the acks the server applied, not those made', async () => {
  const topic = unique('node-sub-stats');
  await publisher.publish(topic, Buffer.from('x'));
  const subscriber = new Subscriber(client);
  let first = null;
  let release;
  const held = new Promise((resolve) => (release = resolve));
  let redelivered = false;
  const sub = subscriber.subscribe(topic, 'stats', (m) => {
    if (m.deliveryAttempt === 1) {
      first = m;
      return held; // not acked: its lease (1 s, not extended) runs out and it is redelivered
    }
    redelivered = true; // acked by returning
    return undefined;
  }, { ackDeadline: 1_000, maxExtension: 0, ...FAST_RETRY });
  await waitFor(() => redelivered, 10_000, 'the redelivery');
  first.ack(); // too late: that delivery is no longer current
  const confirmation = await sub.flush();
  release();
  assert.equal(sub.stats.acked, 1, 'one ack applied');
  assert.equal(sub.stats.ackRequested, 2, 'of two made');
  assert.equal(sub.stats.lost, 1, 'the other lost');
  assert.deepEqual(confirmation.lostIds, [first.ackId]);
  await subscriber.close();
  const stats = await subscriptionStats(topic, 'stats');
  assert.equal(stats.ackedCount, 1);
  assert.equal(stats.pending, 0);
});
