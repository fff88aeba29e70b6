// Unknown option names are refused with a TypeError that names the option
// and lists the known ones, in every options object of the library; the
// lists are those of index.d.ts. No server is needed: the checks come
// before anything is sent.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, Publisher, Subscriber } from '../index.js';

// Nothing listens on port 1: nothing here reaches a server.
const client = connect('127.0.0.1:1');
after(() => client.close());

/** The members of `export interface name { ... }` in index.d.ts. */
function declared(name) {
  const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  const body = new RegExp(`export interface ${name}\\b[^{]*\\{\\n([\\s\\S]*?)\\n\\}`).exec(dts);
  assert.ok(body, `index.d.ts declares ${name}`);
  return [...body[1].matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]);
}

/** Asserts that `error` names `option` and lists exactly `known`. */
function assertUnknown(error, what, option, known) {
  assert.ok(error instanceof TypeError, `a TypeError, not ${error}`);
  const m = /^(.+): unknown option '(\w+)' \(known: (.*)\)$/.exec(error.message);
  assert.ok(m, `the message names the option and the known ones: ${error.message}`);
  assert.equal(m[1], what);
  assert.equal(m[2], option);
  assert.deepEqual(m[3].split(', ').sort(), [...known].sort());
}

const thrown = (fn) => {
  try {
    fn();
  } catch (err) {
    return err;
  }
  assert.fail('did not throw');
};

test('Client and tls options', () => {
  assertUnknown(thrown(() => connect('127.0.0.1:1', { timeout: 5 })), 'Client options', 'timeout', declared('ClientOptions'));
  assertUnknown(thrown(() => connect('127.0.0.1:1', { tls: { rootCa: 'x' } })), 'tls options', 'rootCa', declared('TlsOptions'));
  assertUnknown(
    thrown(() => new Publisher('127.0.0.1:1', { clientOptions: { calltimeout: 5 } })),
    'Client options',
    'calltimeout',
    declared('ClientOptions'),
  );
});

test('Publisher, publish() and close() options', async () => {
  assertUnknown(thrown(() => new Publisher(client, { batchSize: 5 })), 'Publisher options', 'batchSize', declared('PublisherOptions'));
  const publisher = new Publisher(client);
  assertUnknown(await publisher.publish('t', Buffer.from('x'), { ordering_key: 'k' }).catch((e) => e), 'publish options', 'ordering_key', declared('PublishOptions'));
  assertUnknown(await publisher.close({ wait: 1 }).catch((e) => e), 'close options', 'wait', ['timeout']);
  await publisher.close();
  assert.equal(publisher.stats.submitted, 0);
});

test('schedule() and reschedule() options', async () => {
  assertUnknown(await client.schedule('t', Buffer.from('x'), { delayMs: 5 }).catch((e) => e), 'schedule options', 'delayMs', declared('ScheduleOptions'));
  assertUnknown(await client.reschedule('t', '1-0', { delayMs: 5 }).catch((e) => e), 'reschedule options', 'delayMs', ['delay', 'deliverAt']);
});

test('Subscriber, subscribe(), retryPolicy and setFlowControl options', async () => {
  const known = declared('SubscribeOptions');
  assertUnknown(
    thrown(() => new Subscriber(client, { maxOutstandingMessages: 5 })),
    'Subscriber options',
    'maxOutstandingMessages',
    [...known, 'clientOptions', 'token', 'tls'],
  );
  const subscriber = new Subscriber(client);
  const handler = () => {};
  assertUnknown(thrown(() => subscriber.subscribe('t', 's', handler, { maxOutstandingMessages: 5 })), 'subscribe options', 'maxOutstandingMessages', known);
  assertUnknown(
    thrown(() => subscriber.subscribe('t', 's', handler, { retryPolicy: { minBackoff: 5 } })),
    'subscribe options: retryPolicy',
    'minBackoff',
    ['minimumBackoff', 'maximumBackoff'],
  );
  const sub = subscriber.subscribe('t', 's', handler);
  assertUnknown(thrown(() => sub.setFlowControl({ maxOutstandingMessages: 5 })), 'setFlowControl limits', 'maxOutstandingMessages', ['maxOutstanding', 'maxOutstandingBytes']);
  await subscriber.close();
});

test('admin requests: a field their message does not have', async () => {
  const err = await client.admin.createSubscription({ topic: 't', name: 's', settings: { ack_deadline: 5000 } }).catch((e) => e);
  assert.ok(err instanceof TypeError);
  assert.equal(
    err.message,
    "createSubscription request.settings: unknown field 'ack_deadline' (known: ackDeadline, retryPolicy, maxDeliveryAttempts, deadLettering, start, messageOrdering, maxBlocked, filter, maxDeliveriesPerSecond, burst, maxOutstanding)",
  );
  assert.match((await client.admin.getTopic({ topic: 't' }).catch((e) => e)).message, /^getTopic request: unknown field 'topic' \(known: name\)$/);
});
