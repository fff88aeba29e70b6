#!/usr/bin/env node
// Example redq client in Node.js (@grpc/grpc-js).
//
// The service definition is loaded from ../../proto at run time by
// @grpc/proto-loader; nothing is generated ahead of time.
//
//   npm ci && node client.js     # the demo: every step, checked
//
// The server address comes from REDQ_ADDR (default 127.0.0.1:50051).
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const { promisify } = require('node:util');

let grpc, protoLoader;
try {
  grpc = require('@grpc/grpc-js');
  protoLoader = require('@grpc/proto-loader');
} catch (err) {
  console.error('FAIL: node client: @grpc/grpc-js or @grpc/proto-loader is missing: run `npm ci` in clients/node');
  process.exit(1);
}

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');
const ADDR = process.env.REDQ_ADDR || '127.0.0.1:50051';
const RPC_TIMEOUT_MS = 5000; // for each unary call
const RECEIVE_TIMEOUT_MS = 15000; // for the whole receive phase

class StepFailed extends Error {}

// proto-loader maps fields to camelCase (ackId, deliveryAttempt), 64-bit
// integers to strings and bytes to Buffers; Duration and Timestamp are
// built into protobufjs.
const definition = protoLoader.loadSync(path.join('redq', 'v1', 'queue.proto'), {
  includeDirs: [PROTO_DIR],
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const { QueueService } = grpc.loadPackageDefinition(definition).redq.v1;

const deadline = () => new Date(Date.now() + RPC_TIMEOUT_MS);
const tsMillis = (ts) => Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6);
const fmtTs = (ts) => new Date(tsMillis(ts)).toISOString();

function connect() {
  const client = new QueueService(ADDR, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    client.waitForReady(deadline(), (err) => {
      if (err) {
        client.close();
        reject(new StepFailed(`could not connect to redq at ${ADDR} within ${RPC_TIMEOUT_MS / 1000}s (set REDQ_ADDR?)`));
      } else {
        resolve(client);
      }
    });
  });
}

// A unary call as a promise, with a deadline.
function unary(client, method, request) {
  return promisify(client[method].bind(client))(request, { deadline: deadline() });
}

async function demo() {
  const topic = `demo-node-${crypto.randomBytes(6).toString('hex')}`;
  const subscription = 'demo';
  const client = await connect();
  console.log(`node client: server ${ADDR}, topic ${topic}`);

  let call;
  try {
    // 1. Publish a batch of three messages.
    const batch = ['batch-1', 'batch-2', 'batch-3'];
    const published = await unary(client, 'Publish', {
      topic,
      messages: batch.map((p, i) => ({
        payload: Buffer.from(p),
        attributes: { lang: 'node', n: String(i + 1) },
      })),
    });
    if (published.messageIds.length !== 3) {
      throw new StepFailed(`Publish returned ${published.messageIds.length} ids, expected 3`);
    }
    console.log(`published batch of 3: ids ${JSON.stringify(published.messageIds)}`);

    // 2. Schedule one message for one second from now.
    const scheduled = await unary(client, 'ScheduleDelayed', {
      topic,
      message: { payload: Buffer.from('delayed'), attributes: { lang: 'node' } },
      delay: { seconds: 1, nanos: 0 },
    });
    const delayedId = scheduled.messageId;
    console.log(`scheduled 'delayed' (delay 1s): id ${delayedId}, deliver_at ${fmtTs(scheduled.deliverAt)}`);

    // 3. Subscribe, then 4. ack every message, except the first delivery of
    //    batch-2: nack it with zero delay, receive it again (attempt 2) and
    //    ack it then.
    call = client.Subscribe({
      topic,
      subscription,
      consumer: 'node-demo',
      maxOutstandingMessages: 10,
      ackDeadline: { seconds: 10, nanos: 0 },
      start: 'START_POSITION_EARLIEST',
    });
    console.log('subscribed: subscription demo, ack deadline 10s');

    const ack = (received) =>
      unary(client, 'Ack', { topic, subscription, ackIds: [received.ackId] });

    const acked = new Set();
    let nackedAt = null; // when batch-2 was nacked

    // Handles one delivery; resolves true once all four messages are acked.
    async function handle(received, arrival) {
      const msg = received.message;
      const attempt = received.deliveryAttempt;
      const name = msg.payload.toString();
      const where = `${name} (id ${msg.id}, attempt ${attempt})`;
      if (acked.has(name)) throw new StepFailed(`received ${where} again after it was acked`);
      if (name === 'batch-2' && nackedAt === null) {
        if (attempt !== 1) throw new StepFailed(`received ${where}, expected attempt 1`);
        // An explicit zero delay: redeliver now (unset would mean the retry backoff).
        nackedAt = Date.now();
        await unary(client, 'Nack', { topic, subscription, ackIds: [received.ackId], delay: { seconds: 0, nanos: 0 } });
        console.log(`received ${where} -> nack (delay 0s)`);
      } else if (name === 'batch-2') {
        if (attempt !== 2) throw new StepFailed(`received ${where} after the nack, expected attempt 2`);
        await ack(received);
        acked.add(name);
        console.log(`received ${where} ${arrival - nackedAt} ms after the nack -> ack`);
      } else if (batch.includes(name)) {
        if (attempt !== 1) throw new StepFailed(`received ${where}, expected attempt 1`);
        await ack(received);
        acked.add(name);
        console.log(`received ${where} -> ack`);
      } else if (name === 'delayed') {
        if (msg.id !== delayedId) throw new StepFailed(`received ${where}, expected id ${delayedId}`);
        const due = tsMillis(msg.deliverAt);
        if (arrival < due) {
          throw new StepFailed(`received ${where} ${due - arrival} ms before its deliver_at ${fmtTs(msg.deliverAt)}`);
        }
        await ack(received);
        acked.add(name);
        console.log(`received ${where} at +${arrival - due} ms after its deliver_at ${fmtTs(msg.deliverAt)} (not early) -> ack`);
      } else {
        throw new StepFailed(`received unexpected message ${where}`);
      }
      return acked.size === 4;
    }

    await new Promise((resolve, reject) => {
      let finished = false;
      const finish = (err) => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => {
        const waiting = [...batch, 'delayed'].filter((n) => !acked.has(n));
        finish(new StepFailed(`timed out after ${RECEIVE_TIMEOUT_MS / 1000}s waiting for ${JSON.stringify(waiting)}`));
      }, RECEIVE_TIMEOUT_MS);
      // Deliveries are handled one at a time, in order.
      let chain = Promise.resolve();
      call.on('data', (response) => {
        const arrival = Date.now();
        for (const received of response.messages) {
          chain = chain
            .then(() => (finished ? false : handle(received, arrival)))
            .then((done) => done && finish())
            .catch((err) => finish(err));
        }
      });
      call.on('error', (err) => {
        if (err.code !== grpc.status.CANCELLED) finish(new StepFailed(`Subscribe failed: ${err.message}`));
      });
      call.on('end', () => finish(new StepFailed('the Subscribe stream ended')));
    });
  } finally {
    if (call) call.cancel();
    client.close();
  }
  console.log('OK: node client: published 3, scheduled 1, acked 4, nacked 1 and got it back as attempt 2, delayed message not early');
}

demo().catch((err) => {
  const detail = err instanceof StepFailed ? err.message : `${err.code !== undefined ? `gRPC error: ` : ''}${err.message}`;
  console.error(`FAIL: node client: ${detail}`);
  process.exit(1);
});
