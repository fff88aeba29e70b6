#!/usr/bin/env node
// Example redq client in Node.js, on the redq library of this folder
// (index.js): the demo publishes a batch, schedules a message, subscribes,
// acks, nacks one message and gets it back, and checks every step.
//
//   npm ci && node client.js                     # the demo
//   node client.js publish TOPIC PAYLOAD [PAYLOAD...] [--attr KEY=VALUE ...]
//
// The server address comes from REDQ_ADDR (default 127.0.0.1:50051;
// https://host:port for TLS). As with the redq CLI, REDQ_TOKEN is sent as
// the bearer token, and REDQ_TLS_CA, REDQ_CLIENT_TLS_CERT and
// REDQ_CLIENT_TLS_KEY (PEM files) turn TLS (mTLS) on. The demo ends with a
// line starting `OK:`, or `FAIL:` and exit status 1.

import { randomBytes } from 'node:crypto';

const ADDR = process.env.REDQ_ADDR || '127.0.0.1:50051';
const CONNECT_TIMEOUT_MS = 5000;
const RECEIVE_TIMEOUT_MS = 15000; // for the whole receive phase

class StepFailed extends Error {}

let redq;
try {
  redq = await import('./index.js');
} catch (err) {
  console.error(`FAIL: node client: the library could not load (${err.message}): run \`npm ci\` in clients/node`);
  process.exit(1);
}
const { connect, Publisher, Subscriber } = redq;

/** token and tls from the environment, as the redq CLI reads them; none when unset. */
function securityOptions() {
  const { REDQ_TOKEN: token, REDQ_TLS_CA: ca, REDQ_CLIENT_TLS_CERT: cert, REDQ_CLIENT_TLS_KEY: key } = process.env;
  const options = {};
  if (token) options.token = token;
  if (ca || cert || key) options.tls = { ...(ca && { ca }), ...(cert && { cert }), ...(key && { key }) };
  return options;
}

async function open() {
  const client = connect(ADDR, { callTimeout: 5000, ...securityOptions() });
  try {
    await client.waitForReady(CONNECT_TIMEOUT_MS);
  } catch {
    client.close();
    throw new StepFailed(`could not connect to redq at ${ADDR} within ${CONNECT_TIMEOUT_MS / 1000}s (set REDQ_ADDR?)`);
  }
  return client;
}

async function demo() {
  const topic = `demo-node-${randomBytes(6).toString('hex')}`;
  const client = await open();
  const publisher = new Publisher(client);
  const subscriber = new Subscriber(client);
  console.log(`node client: server ${ADDR}, topic ${topic}`);
  try {
    // 1. Publish a batch of three messages: three publish() calls at once go
    //    out as one request of the publisher's stream.
    const batch = ['batch-1', 'batch-2', 'batch-3'];
    // Payloads are bytes: a Buffer (or Uint8Array), never a string.
    const ids = await Promise.all(
      batch.map((p, i) => publisher.publish(topic, Buffer.from(p), { attributes: { lang: 'node', n: String(i + 1) } })),
    );
    if (publisher.stats.requests !== 1) throw new StepFailed(`the batch took ${publisher.stats.requests} requests, expected 1`);
    console.log(`published batch of 3: ids ${JSON.stringify(ids)}`);

    // 2. Schedule one message for one second from now.
    const scheduled = await client.schedule(topic, Buffer.from('delayed'), { delay: 1000, attributes: { lang: 'node' } });
    console.log(`scheduled 'delayed' (delay 1s): id ${scheduled.id}, deliver_at ${scheduled.deliverAt.toISOString()}`);

    // 3. Subscribe, then 4. ack every message (by returning from the
    //    handler), except the first delivery of batch-2: nack it with zero
    //    delay, receive it again (attempt 2) and ack it then.
    const acked = new Set();
    let nackedAt = null;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const waiting = [...batch, 'delayed'].filter((n) => !acked.has(n));
        reject(new StepFailed(`timed out after ${RECEIVE_TIMEOUT_MS / 1000}s waiting for ${JSON.stringify(waiting)}`));
      }, RECEIVE_TIMEOUT_MS);
      const fail = (err) => {
        clearTimeout(timer);
        reject(err);
      };
      const handle = (m) => {
        const arrival = Date.now();
        const name = m.payload.toString();
        const where = `${name} (id ${m.id}, attempt ${m.deliveryAttempt})`;
        if (acked.has(name)) throw new StepFailed(`received ${where} again after it was acked`);
        if (name === 'batch-2' && nackedAt === null) {
          if (m.deliveryAttempt !== 1) throw new StepFailed(`received ${where}, expected attempt 1`);
          nackedAt = arrival;
          m.nack(0); // an explicit zero delay: redeliver now (none would mean the retry backoff)
          console.log(`received ${where} -> nack (delay 0s)`);
          return;
        }
        if (name === 'batch-2') {
          if (m.deliveryAttempt !== 2) throw new StepFailed(`received ${where} after the nack, expected attempt 2`);
          console.log(`received ${where} ${arrival - nackedAt} ms after the nack -> ack`);
        } else if (batch.includes(name)) {
          if (m.deliveryAttempt !== 1) throw new StepFailed(`received ${where}, expected attempt 1`);
          if (m.attributes.lang !== 'node') throw new StepFailed(`received ${where} without its attributes`);
          console.log(`received ${where} -> ack`);
        } else if (name === 'delayed') {
          if (m.id !== scheduled.id) throw new StepFailed(`received ${where}, expected id ${scheduled.id}`);
          const due = m.deliverAt.getTime();
          if (arrival < due) throw new StepFailed(`received ${where} ${due - arrival} ms before its deliver_at ${m.deliverAt.toISOString()}`);
          console.log(`received ${where} at +${arrival - due} ms after its deliver_at ${m.deliverAt.toISOString()} (not early) -> ack`);
        } else {
          throw new StepFailed(`received unexpected message ${where}`);
        }
        acked.add(name);
        if (acked.size === 4) {
          clearTimeout(timer);
          resolve();
        }
      };
      const sub = subscriber.subscribe(topic, 'demo', handle, {
        consumer: 'node-demo',
        maxOutstanding: 10,
        concurrency: 1, // one at a time, in order
        ackDeadline: 10_000,
        start: 'earliest',
        // A failed check fails the demo (the handler's throw also nacks).
        onError: (err, message) => (message ? fail(err) : console.log(`stream: ${err.message} (reconnecting)`)),
      });
      // A refused stream rejects `opened` and `closed` (not onError).
      sub.closed.catch((err) => fail(new StepFailed(`StreamingSubscribe failed: ${err.message}`)));
      sub.opened.then(() => console.log('subscribed: subscription demo, ack deadline 10s'), () => {});
    });
    // close() returns once the server has applied the last acks.
    await subscriber.close();
    const stats = (await client.admin.getSubscription({ topic, name: 'demo' })).stats;
    if (stats.ackedCount !== 4) throw new StepFailed(`the subscription counts ${stats.ackedCount} acks, expected 4`);
  } finally {
    await subscriber.close();
    await publisher.close();
    client.close();
  }
  console.log('OK: node client: published 3, scheduled 1, acked 4, nacked 1 and got it back as attempt 2, delayed message not early');
}

// publish TOPIC PAYLOAD [PAYLOAD...] [--attr KEY=VALUE ...]
async function publishCommand(args) {
  const attributes = {};
  const payloads = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--attr') {
      const kv = args[++i] ?? '';
      const eq = kv.indexOf('=');
      if (eq < 1) throw new StepFailed(`--attr wants KEY=VALUE, not ${JSON.stringify(kv)}`);
      attributes[kv.slice(0, eq)] = kv.slice(eq + 1);
    } else {
      payloads.push(args[i]);
    }
  }
  const [topic, ...bodies] = payloads;
  if (!topic || bodies.length === 0) throw new StepFailed('usage: node client.js publish TOPIC PAYLOAD [PAYLOAD...] [--attr KEY=VALUE ...]');
  const client = await open();
  const publisher = new Publisher(client);
  try {
    const ids = await Promise.all(bodies.map((body) => publisher.publish(topic, Buffer.from(body), { attributes })));
    bodies.forEach((body, i) => console.log(`published '${body}' to ${topic}: id ${ids[i]}`));
  } finally {
    await publisher.close();
    client.close();
  }
}

const [command, ...args] = process.argv.slice(2);
const run = command === 'publish' ? () => publishCommand(args) : demo;
run().then(
  () => process.exit(0),
  (err) => {
    const detail = err instanceof StepFailed ? err.message : `${err.code !== undefined ? 'gRPC error: ' : ''}${err.message}`;
    console.error(`FAIL: node client: ${detail}`);
    process.exit(1);
  },
);
