// The packaging check of test.sh: copied into an empty directory outside the
// repository where the tarball of `npm pack` is installed, it imports 'redq'
// as a user's program would, publishes one message to a fresh topic at
// $REDQ_ADDR, receives it through a Subscriber, acks it and waits for the
// server to confirm the ack. Exits 0, or prints FAIL: and exits 1 (also after
// RECEIVE_TIMEOUT_MS without the message).

import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';

const RECEIVE_TIMEOUT_MS = 20_000;

function fail(why) {
  console.error(`FAIL: package check: ${why}`);
  process.exit(1);
}

const timer = setTimeout(() => fail(`no message received within ${RECEIVE_TIMEOUT_MS / 1000}s`), RECEIVE_TIMEOUT_MS);
timer.unref();

// The package must be a copy in node_modules (not a link back to the source
// tree) and load its protos from inside itself.
const installed = join(process.cwd(), 'node_modules', 'redq');
if (lstatSync(installed).isSymbolicLink()) fail(`${installed} is a link, not the installed tarball`);
let redq;
try {
  redq = await import('redq');
} catch (err) {
  fail(`import 'redq': ${err.message}`);
}
const { connect, Publisher, Subscriber, PROTO_DIR } = redq;
if (!existsSync(PROTO_DIR)) fail(`PROTO_DIR ${PROTO_DIR} does not exist: the package lacks its protos`);
if (!realpathSync(PROTO_DIR).startsWith(realpathSync(installed) + sep)) {
  fail(`PROTO_DIR ${PROTO_DIR} is outside the installed package ${installed}`);
}

const address = process.env.REDQ_ADDR || fail('set REDQ_ADDR=host:port of a running redq');
const topic = `package-check-${randomBytes(6).toString('hex')}`;
const payload = Buffer.from(`from the tarball ${randomBytes(4).toString('hex')}`);
let client;
try {
  client = connect(address);
  await client.waitForReady(10_000);
  const subscriber = new Subscriber(client);
  let delivered;
  const received = new Promise((resolve) => {
    delivered = resolve;
  });
  const subscription = subscriber.subscribe(topic, 'check', (message) => {
    message.ack();
    delivered(message);
  });
  await subscription.opened; // the subscription exists before the publish

  const publisher = new Publisher(client);
  const id = await publisher.publish(topic, payload, { attributes: { from: 'tarball' } });
  await publisher.close();

  const message = await received;
  if (message.id !== id) fail(`received message ${message.id}, published ${id}`);
  if (!message.payload.equals(payload)) fail(`received payload ${message.payload}, published ${payload}`);
  if (message.attributes.from !== 'tarball') fail(`received attributes ${JSON.stringify(message.attributes)}`);
  const confirmation = await subscription.flush();
  if (!confirmation.ackedIds.includes(message.ackId)) fail(`the server did not confirm the ack: ${JSON.stringify(confirmation)}`);
  await subscriber.close();

  // An admin call too: the admin client checks requests against admin.proto.
  const info = await client.admin.getSubscription({ topic, name: 'check' });
  if (info.stats.pending !== 0) fail(`${info.stats.pending} message(s) still pending after the ack`);
  await client.admin.deleteTopic({ name: topic });
  console.log(`package check: ${installed} (protos from ${PROTO_DIR}): published ${id} to ${topic}, received and acked it`);
} catch (err) {
  fail(err.stack ?? String(err));
} finally {
  client?.close();
}
