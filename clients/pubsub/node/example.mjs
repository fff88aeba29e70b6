#!/usr/bin/env node
// Drive a Pub/Sub v1 server with the official Node client and print what it saw.
//
// Runs against whatever PUBSUB_EMULATOR_HOST points at (redq or Google's emulator):
// creates a topic and three subscriptions (plain, message ordering, retain acked
// messages), checks the error statuses of a few bad calls, publishes 50 messages
// with batching and ordering keys, receives them on the streaming subscriber with
// flow control (one message is nacked once and must come back unchanged), seeks
// the retaining subscription back in time and receives everything again, then
// deletes what it made.
//
// Prints ONE JSON object on stdout holding only what any correct Pub/Sub server
// must make identical (status code names, counts, attributes; no ids, times or
// timing), so scripts/pubsub-differential.sh can diff two servers. Exits 1 when a
// check fails (the reasons go to stderr), 2 on bad usage; every wait is bounded
// and the whole run is cut at RUN_BUDGET_MS.
//
// Usage: PUBSUB_EMULATOR_HOST=127.0.0.1:50051 node example.mjs [PROJECT_ID]
// (the project defaults to $GOOGLE_CLOUD_PROJECT, else "demo").

import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { PubSub, v1 } from '@google-cloud/pubsub';

const RUN_BUDGET_MS = 50_000; // the whole run, cleanup included, stays under this
const RPC_TIMEOUT_MS = 10_000; // one admin call
const PHASE_TIMEOUT_MS = 15_000; // one receiving phase
const SETTLE_MS = 500; // after a phase has all it waited for: time for stray extra deliveries
const QUIET_MS = 500; // no delivery for this long: hold no longer for MAX_OUTSTANDING messages

const MESSAGES = 50;
const ORDERING_KEYS = ['alpha', 'beta']; // five messages each, published in between the others
const KEYED_PER_KEY = 5;
const NACKED_INDEX = '8'; // a message without ordering key
const MAX_OUTSTANDING = 10;
const PULL_MAX_MESSAGES = 10;

// gRPC status code names by number: what both servers must agree on.
const CODE_NAMES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION',
  'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS',
  'UNAUTHENTICATED',
];

const runEnd = Date.now() + RUN_BUDGET_MS;
/** What is left of the run's budget, capped: every wait takes this. */
const left = (cap) => Math.max(100, Math.min(cap, runEnd - Date.now()));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Timeout extends Error {
  constructor(what) {
    super(`${what}: no answer in time`);
    this.code = 4; // DEADLINE_EXCEEDED
  }
}

/** A promise that rejects with DEADLINE_EXCEEDED when `promise` takes longer than `ms`. */
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(what)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function codeName(err) {
  if (typeof err?.code === 'number' && CODE_NAMES[err.code]) return CODE_NAMES[err.code];
  return err?.name ?? String(err);
}

/** Run a call that must fail; its status code name, or "OK" if it did not fail. */
async function expectError(call, what) {
  try {
    await bounded(call(), left(RPC_TIMEOUT_MS), what);
  } catch (err) {
    return codeName(err);
  }
  return 'OK';
}

/** The 50 messages: {data, attributes, orderingKey}, ten of them on two ordering keys. */
function messagePlan(lang) {
  const keyed = new Map(); // index -> key: keys alternate so they interleave with the rest
  for (let n = 0; n < KEYED_PER_KEY * ORDERING_KEYS.length; n++) {
    keyed.set(3 + 4 * n, ORDERING_KEYS[n % ORDERING_KEYS.length]);
  }
  const seq = Object.fromEntries(ORDERING_KEYS.map((key) => [key, 0]));
  const plan = [];
  for (let index = 0; index < MESSAGES; index++) {
    const key = keyed.get(index) ?? '';
    const attributes = { index: String(index), lang, kind: key ? 'keyed' : 'plain' };
    if (key) attributes.seq = String(seq[key]++);
    plan.push({ data: Buffer.from(`message ${index}`), attributes, orderingKey: key });
  }
  return plan;
}

const sortedObject = (o) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : 1)));

/**
 * Stream-pull `subscription` until done(deliveries) holds, settling each message
 * with settle(message, first). With holdUntilFull, messages are held until
 * MAX_OUTSTANDING are outstanding (or none arrived for a moment), so the client's
 * flow control is what stops delivery. Returns {deliveries, maxOutstanding, error}.
 */
async function receive(pubsub, name, settle, done, holdUntilFull = false) {
  const subscription = pubsub.subscription(name, {
    // allowExcessMessages: false makes the client itself hold back what a server sends
    // beyond maxMessages (Google's emulator ignores max_outstanding_messages).
    flowControl: { maxMessages: MAX_OUTSTANDING, allowExcessMessages: false },
  });
  let held = [];
  const deliveries = []; // {index, data, attributes, orderingKey} of every delivery
  let streamError = null;
  let lastArrival = Date.now();
  subscription.on('message', (message) => {
    held.push(message);
    lastArrival = Date.now();
    deliveries.push({
      index: message.attributes.index,
      data: message.data.toString(),
      attributes: { ...message.attributes },
      orderingKey: message.orderingKey ?? '',
    });
  });
  subscription.on('error', (err) => {
    streamError = codeName(err);
  });
  const seen = new Map();
  let maxOutstanding = 0;
  let error = null;
  const deadline = Date.now() + left(PHASE_TIMEOUT_MS);
  let finishedAt = null;
  try {
    for (;;) {
      const now = Date.now();
      if (streamError) {
        error = streamError;
        break;
      }
      if (now >= deadline) {
        error = 'DEADLINE_EXCEEDED';
        break;
      }
      if (finishedAt === null && done(deliveries)) finishedAt = now;
      if (finishedAt !== null && now - finishedAt >= SETTLE_MS) break;
      const quiet = now - lastArrival >= QUIET_MS; // "no more coming right now"
      if (held.length === 0 || (holdUntilFull && held.length < MAX_OUTSTANDING && !quiet)) {
        await sleep(20);
        continue;
      }
      const batch = held;
      held = [];
      maxOutstanding = Math.max(maxOutstanding, batch.length);
      for (const message of batch) {
        const index = message.attributes.index;
        const first = !seen.has(index);
        seen.set(index, (seen.get(index) ?? 0) + 1);
        settle(message, first);
      }
    }
  } finally {
    subscription.removeAllListeners('message');
    try {
      // close() flushes the queued acks and nacks before it resolves.
      await bounded(subscription.close(), left(5_000), 'closing the subscriber');
    } catch {
      // the run's result is already known
    }
  }
  return { deliveries, maxOutstanding, error };
}

const distinct = (deliveries) => new Set(deliveries.map((d) => d.index)).size;

/**
 * Unary Pull (max PULL_MAX_MESSAGES) and Acknowledge until `want` distinct
 * messages came. Returns {indexes, largest response, error}.
 */
async function pullAndAck(client, name, want) {
  const indexes = new Set();
  let largest = 0;
  const deadline = Date.now() + left(PHASE_TIMEOUT_MS);
  while (indexes.size < want) {
    if (Date.now() >= deadline) return { indexes, largest, error: 'DEADLINE_EXCEEDED' };
    let response;
    try {
      const timeout = Math.max(500, Math.min(5_000, deadline - Date.now()));
      [response] = await bounded(
        client.pull({ subscription: name, maxMessages: PULL_MAX_MESSAGES }, { timeout }),
        timeout + 1_000,
        'pull',
      );
    } catch (err) {
      if (codeName(err) === 'DEADLINE_EXCEEDED') continue; // an empty long poll
      return { indexes, largest, error: codeName(err) };
    }
    const received = response.receivedMessages ?? [];
    largest = Math.max(largest, received.length);
    if (received.length === 0) continue;
    for (const r of received) indexes.add(r.message.attributes.index);
    await bounded(
      client.acknowledge({ subscription: name, ackIds: received.map((r) => r.ackId) }),
      left(RPC_TIMEOUT_MS),
      'acknowledge',
    );
  }
  return { indexes, largest, error: null };
}

async function main() {
  if (process.argv.length > 3 || !process.env.PUBSUB_EMULATOR_HOST) {
    console.error('usage: PUBSUB_EMULATOR_HOST=host:port node example.mjs [PROJECT_ID]');
    return 2;
  }
  const projectId = process.argv[2] ?? process.env.GOOGLE_CLOUD_PROJECT ?? 'demo';
  // Without credentials the client's auth library otherwise probes the GCE metadata
  // server (169.254.169.254, metadata.google.internal) each time it makes a gRPC stub,
  // even for an emulator host: only loopback traffic here.
  process.env.METADATA_SERVER_DETECTION ??= 'none';
  const watchdog = setTimeout(() => {
    console.error('FAIL: run budget exceeded');
    process.exit(1);
  }, RUN_BUDGET_MS + 8_000);
  watchdog.unref();

  const version = createRequire(import.meta.url)('@google-cloud/pubsub/package.json').version;
  const pubsub = new PubSub({ projectId });
  const run = randomUUID().replaceAll('-', '').slice(0, 12);
  const topicId = `redq-example-node-${run}`;
  const topicName = `projects/${projectId}/topics/${topicId}`;
  const missingTopic = `projects/${projectId}/topics/${topicId}-missing`;
  const subs = {
    main: `projects/${projectId}/subscriptions/${topicId}-main`,
    ordered: `projects/${projectId}/subscriptions/${topicId}-ordered`,
    retain: `projects/${projectId}/subscriptions/${topicId}-retain`,
  };
  const missingSub = `projects/${projectId}/subscriptions/${topicId}-missing`;
  const gax = () => ({ timeout: left(RPC_TIMEOUT_MS) });
  const call = (promise, what) => bounded(promise, left(RPC_TIMEOUT_MS) + 1_000, what);

  const result = { client: `node @google-cloud/pubsub ${version}` };
  const failures = [];
  const check = (ok, what) => {
    if (!ok) failures.push(what);
  };

  let createdTopic = false;
  const createdSubs = [];
  let phase = 'setup';
  const publisher = pubsub.topic(topicName, {
    batching: { maxMessages: 10, maxBytes: 64 * 1024, maxMilliseconds: 50 },
    messageOrdering: true,
  });
  let unary = null;
  try {
    phase = 'create';
    await call(pubsub.createTopic({ name: topicName, gaxOpts: gax() }), 'create topic');
    createdTopic = true;
    const settings = { main: {}, ordered: { enableMessageOrdering: true }, retain: { retainAckedMessages: true } };
    for (const [role, name] of Object.entries(subs)) {
      await call(pubsub.createSubscription(topicName, name, { ...settings[role], gaxOpts: gax() }), `create ${role}`);
      createdSubs.push(name);
    }

    phase = 'errors';
    const errors = {
      create_existing_topic: await expectError(() => pubsub.createTopic({ name: topicName, gaxOpts: gax() }), 'create existing topic'),
      create_existing_subscription: await expectError(
        () => pubsub.createSubscription(topicName, subs.main, { gaxOpts: gax() }),
        'create existing subscription',
      ),
      create_subscription_on_missing_topic: await expectError(
        () => pubsub.createSubscription(missingTopic, missingSub, { gaxOpts: gax() }),
        'create subscription on missing topic',
      ),
      get_missing_topic: await expectError(() => pubsub.topic(missingTopic).getMetadata(gax()), 'get missing topic'),
      get_missing_subscription: await expectError(
        () => pubsub.subscription(missingSub).getMetadata(gax()),
        'get missing subscription',
      ),
      publish_to_missing_topic: await expectError(
        () => pubsub.topic(missingTopic).publishMessage({ data: Buffer.from('nobody') }),
        'publish to missing topic',
      ),
    };
    result.errors = errors;
    for (const [name, code] of Object.entries(errors)) {
      const want = name.startsWith('create_existing') ? 'ALREADY_EXISTS' : 'NOT_FOUND';
      check(code === want, `${name}: got ${code}, want ${want}`);
    }

    phase = 'describe';
    const described = {};
    for (const [role, name] of Object.entries(subs)) {
      const [metadata] = await call(pubsub.subscription(name).getMetadata(gax()), `get ${role}`);
      described[role] = {
        topic_matches: metadata.topic === topicName,
        ack_deadline_seconds: metadata.ackDeadlineSeconds,
        enable_message_ordering: metadata.enableMessageOrdering,
        retain_acked_messages: metadata.retainAckedMessages,
      };
    }
    result.subscriptions = described;
    check(Object.values(described).every((d) => d.topic_matches), 'a subscription names another topic');
    check(described.main.ack_deadline_seconds === 10, 'default ack deadline is not 10 s');
    check(described.ordered.enable_message_ordering, 'ordering subscription lost enable_message_ordering');
    check(described.retain.retain_acked_messages, 'retain subscription lost retain_acked_messages');
    const [listed] = await call(pubsub.topic(topicName).getSubscriptions(gax()), 'list topic subscriptions');
    const roles = listed.map((s) => s.name.split('-').pop()).sort();
    result.topic_subscriptions = roles;
    check(JSON.stringify(roles) === JSON.stringify(['main', 'ordered', 'retain']), `topic lists subscriptions ${roles}`);

    phase = 'publish';
    const plan = messagePlan('node');
    const beforePublish = new Date(Date.now() - 1_000);
    const ids = await call(Promise.all(plan.map((m) => publisher.publishMessage(m))), 'publish');
    result.published = {
      messages: ids.length,
      distinct_message_ids: new Set(ids).size,
      with_ordering_key: plan.filter((m) => m.orderingKey).length,
    };
    check(new Set(ids).size === MESSAGES, 'publish returned repeated message ids');
    const byIndex = new Map(plan.map((m) => [m.attributes.index, m]));

    phase = 'receive';
    const main = await receive(
      pubsub,
      subs.main,
      (message, first) => (message.attributes.index === NACKED_INDEX && first ? message.nack() : message.ack()),
      (ds) => distinct(ds) === MESSAGES && ds.filter((d) => d.index === NACKED_INDEX).length >= 2,
      true,
    );
    const nacked = main.deliveries.filter((d) => d.index === NACKED_INDEX);
    const want = byIndex.get(NACKED_INDEX);
    const identical =
      nacked.length >= 2 &&
      nacked.every(
        (d) =>
          d.data === want.data.toString() &&
          JSON.stringify(sortedObject(d.attributes)) === JSON.stringify(sortedObject(want.attributes)) &&
          d.orderingKey === want.orderingKey,
      );
    const counts = new Map();
    for (const d of main.deliveries) counts.set(d.index, (counts.get(d.index) ?? 0) + 1);
    let duplicates = 0;
    for (const [index, n] of counts) if (index !== NACKED_INDEX) duplicates += n - 1;
    const asPublished = main.deliveries.every((d) => byIndex.get(d.index)?.orderingKey === d.orderingKey);
    const unknownPayloads = main.deliveries.filter((d) => byIndex.get(d.index)?.data.toString() !== d.data).length;
    result.receive = {
      error: main.error,
      distinct_messages: distinct(main.deliveries),
      deliveries: main.deliveries.length,
      nacked_redeliveries: nacked.length ? nacked.length - 1 : 0,
      redelivery_identical: identical,
      duplicates_of_acked: duplicates,
      max_outstanding: main.maxOutstanding,
      nacked_message: {
        data: nacked.length ? nacked[0].data : null,
        attributes: nacked.length ? sortedObject(nacked[0].attributes) : null,
        ordering_key: nacked.length ? nacked[0].orderingKey : null,
      },
      ordering_key_of_message_3: main.deliveries.find((d) => d.index === '3')?.orderingKey ?? null,
      ordering_keys_as_published: asPublished,
      unknown_payloads: unknownPayloads,
    };
    check(main.error === null, `receive: ${main.error}`);
    check(distinct(main.deliveries) === MESSAGES, `receive: ${distinct(main.deliveries)} of ${MESSAGES} messages`);
    check(nacked.length === 2, `nacked message delivered ${nacked.length} times, want 2`);
    check(identical, 'the redelivered message differs from the first delivery');
    check(main.maxOutstanding > 0 && main.maxOutstanding <= MAX_OUTSTANDING, `${main.maxOutstanding} messages outstanding at once`);
    check(asPublished, 'a message came with another ordering key');
    check(unknownPayloads === 0, "a message's data does not match its index");

    phase = 'ordered';
    const ordered = await receive(
      pubsub,
      subs.ordered,
      (message) => message.ack(),
      (ds) => distinct(ds) === MESSAGES,
    );
    const seqs = Object.fromEntries(ORDERING_KEYS.map((key) => [key, []]));
    const firstSeen = new Set();
    for (const d of ordered.deliveries) {
      if (d.orderingKey && !firstSeen.has(d.index)) (seqs[d.orderingKey] ??= []).push(Number(d.attributes.seq));
      firstSeen.add(d.index);
    }
    const inOrder = Object.values(seqs).every(
      (s) => JSON.stringify(s) === JSON.stringify([...Array(KEYED_PER_KEY).keys()]),
    );
    result.ordered = {
      error: ordered.error,
      distinct_messages: distinct(ordered.deliveries),
      per_key: sortedObject(Object.fromEntries(Object.entries(seqs).map(([key, s]) => [key, s.length]))),
      in_publish_order: inOrder,
    };
    check(ordered.error === null, `ordered: ${ordered.error}`);
    check(distinct(ordered.deliveries) === MESSAGES, `ordered: ${distinct(ordered.deliveries)} of ${MESSAGES} messages`);
    check(inOrder, `ordering keys out of publish order: ${JSON.stringify(seqs)}`);

    phase = 'seek';
    // Read the retaining subscription once with unary Pull + Acknowledge (Google's
    // emulator never closes a StreamingPull that the client cancelled, so a second
    // stream on the same subscription would get nothing there), seek back to before
    // the publishes, then stream everything again.
    unary = new v1.SubscriberClient(await pubsub.getClientConfig());
    const pulled = await pullAndAck(unary, subs.retain, MESSAGES);
    await call(pubsub.subscription(subs.retain).seek(beforePublish, gax()), 'seek');
    const again = await receive(
      pubsub,
      subs.retain,
      (message) => message.ack(),
      (ds) => distinct(ds) === MESSAGES,
    );
    result.seek = {
      pull_error: pulled.error,
      pulled_before_seek: pulled.indexes.size,
      pull_response_within_max_messages: pulled.largest <= PULL_MAX_MESSAGES,
      error: again.error,
      received_after_seek_to_before_publish: distinct(again.deliveries),
    };
    check(pulled.error === null, `pull: ${pulled.error}`);
    check(pulled.indexes.size === MESSAGES, `retain: pulled ${pulled.indexes.size} of ${MESSAGES} before the seek`);
    check(pulled.largest <= PULL_MAX_MESSAGES, `a Pull response held ${pulled.largest} > ${PULL_MAX_MESSAGES} messages`);
    check(again.error === null, `after seek: ${again.error}`);
    check(distinct(again.deliveries) === MESSAGES, `retain: ${distinct(again.deliveries)} of ${MESSAGES} after the seek`);

    phase = 'delete';
    while (createdSubs.length) {
      await call(pubsub.subscription(createdSubs[0]).delete(gax()), 'delete subscription');
      createdSubs.shift();
    }
    await call(pubsub.topic(topicName).delete(gax()), 'delete topic');
    createdTopic = false;
    const deleted = {
      get_deleted_topic: await expectError(() => pubsub.topic(topicName).getMetadata(gax()), 'get deleted topic'),
      get_deleted_subscription: await expectError(
        () => pubsub.subscription(subs.main).getMetadata(gax()),
        'get deleted subscription',
      ),
    };
    result.deleted = deleted;
    for (const [name, code] of Object.entries(deleted)) check(code === 'NOT_FOUND', `${name}: got ${code}, want NOT_FOUND`);
  } catch (err) {
    result.fatal = { phase, code: codeName(err) };
    failures.push(`${phase}: ${codeName(err)}: ${err?.message ?? err}`);
  } finally {
    for (const name of createdSubs) {
      await bounded(pubsub.subscription(name).delete({ timeout: left(3_000) }), left(4_000), 'cleanup').catch(() => {});
    }
    if (createdTopic) {
      await bounded(pubsub.topic(topicName).delete({ timeout: left(3_000) }), left(4_000), 'cleanup').catch(() => {});
    }
    if (unary) await unary.close().catch(() => {});
    await bounded(pubsub.close(), left(3_000), 'close').catch(() => {});
  }

  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  for (const failure of failures) console.error(`FAIL: ${failure}`);
  return failures.length ? 1 : 0;
}

process.exitCode = await main();
// The client's timers and channels can hold the event loop open; the result is out.
process.stdout.write('', () => process.exit(process.exitCode));
