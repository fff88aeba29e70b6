// TLS, mTLS and tokens against a secured redq this file starts itself
// (`redq dev` with --tls-cert/--tls-key, --tls-client-ca with optional
// client certificates, and a tokens file; see test-support/secure-server.js):
// publish, subscribe and ack over TLS with a good token; no token
// (UNAUTHENTICATED) and a token without the grant (PERMISSION_DENIED) never
// retried; the server certificate checked; a client certificate accepted; a
// revoked token ending a subscriber and failing a publisher. The option
// checks run without a server.

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import grpc from '@grpc/grpc-js';
import { connect, Publisher, Subscriber, RedqError, status } from '../index.js';
import { unique, waitFor } from '../test-support/helpers.js';
import { redqBinary, startSecureServer, pemText } from '../test-support/secure-server.js';

/** A channel interceptor counting the calls (and streams) started, to tell a retry. */
function callCounter() {
  const counter = { calls: 0 };
  counter.interceptor = (options, nextCall) => {
    counter.calls++;
    return new grpc.InterceptingCall(nextCall(options));
  };
  return counter;
}

/** The value of `promise`, or an Error if it takes more than `ms` (the timer cleared either way). */
async function within(promise, ms, what) {
  let timer;
  const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const assertCode = (err, code) => {
  assert.ok(err instanceof RedqError, `a RedqError, not ${inspect(err)}`);
  assert.equal(err.code, code, err.message);
};

test('options: tls and token are checked, and the token shows in no error or inspect', () => {
  const token = 'redq_not-a-real-token-0123456789';
  assert.throws(() => connect('127.0.0.1:1', { token: 'two words' }), /token: must be/);
  assert.throws(() => connect('127.0.0.1:1', { token: '' }), /token: must be/);
  assert.throws(() => connect('127.0.0.1:1', { tls: { cert: 'a.crt' } }), /cert and key together/);
  assert.throws(() => connect('127.0.0.1:1', { tls: { rootCa: 'x' } }), /tls options: unknown option 'rootCa' \(known: ca, cert, key, serverName\)/);
  assert.throws(() => connect('127.0.0.1:1', { tls: { ca: '/no/such/ca.crt' } }), /tls\.ca: cannot read \/no\/such\/ca\.crt/);
  assert.throws(() => connect('127.0.0.1:1', { tls: true, credentials: grpc.credentials.createInsecure() }), /not both/);
  assert.throws(() => connect('http://127.0.0.1:1', { tls: true }), /http:\/\//);
  assert.throws(() => connect('https://127.0.0.1:1', { tls: false }), /https:\/\//);
  const client = connect('127.0.0.1:1', { token });
  assert.equal(client.tls, false, 'plaintext by default');
  assert.throws(() => new Publisher(client, { token }), /given a Client: set token and tls on the Client/);
  assert.throws(() => new Subscriber(client, { tls: true }), /given a Client/);
  assert.ok(!inspect(client, { depth: 8, showHidden: true }).includes(token), 'the token is not on the Client');
  client.close();
  const secure = connect('https://127.0.0.1:1/');
  assert.equal(secure.address, '127.0.0.1:1');
  assert.equal(secure.tls, true);
  secure.close();
});

const bin = redqBinary();
const skip = bin === null
  ? 'no redq binary: set REDQ_BIN, or build target/debug/redq (cargo build), or put one at /tmp/redq-bin/redq'
  : false;

describe('TLS and tokens against a secured redq', { skip }, () => {
  let server;
  let tls; // trusts the test CA
  before(async () => {
    server = await startSecureServer(bin);
    tls = { ca: server.certs.ca };
  });
  after(() => server?.stop());

  test('TLS with a good token: publish, subscribe and ack (Client, Publisher, Subscriber, admin)', async () => {
    const topic = unique('node-sec.basic');
    const client = connect(server.address, { tls, token: server.tokens.good });
    assert.equal(client.tls, true);
    await client.waitForReady(5_000);
    // Entry points given an address: the CA as PEM bytes with serverName, and as PEM text over https://.
    const publisher = new Publisher(server.address, {
      tls: { ca: readFileSync(server.certs.ca), serverName: 'localhost' },
      token: server.tokens.good,
    });
    const subscriber = new Subscriber(`https://${server.address}`, { tls: { ca: pemText(server.certs.ca) }, token: server.tokens.good });
    try {
      const ids = await Promise.all(['a', 'b', 'c'].map((p) => publisher.publish(topic, Buffer.from(p))));
      const received = [];
      const sub = subscriber.subscribe(topic, 'billing', (m) => {
        received.push(m.id);
      });
      await waitFor(() => received.length === 3, 10_000, '3 messages over TLS');
      await sub.close();
      assert.deepEqual(received, ids);
      const info = await client.admin.getSubscription({ topic, name: 'billing' });
      assert.equal(info.stats.ackedCount, 3, 'acked over TLS');
      assert.equal(publisher.stats.retries, 0);
    } finally {
      await publisher.close();
      await subscriber.close();
      client.close();
    }
  });

  test('the server certificate is checked: an unknown CA or another serverName fails (UNAVAILABLE)', async () => {
    // Node's default roots do not know the test CA.
    const untrusted = connect(server.address, { tls: true, token: server.tokens.good, callTimeout: 5_000 });
    const wrongName = connect(server.address, { tls: { ...tls, serverName: 'not-this-server.example' }, token: server.tokens.good, callTimeout: 5_000 });
    try {
      assertCode(await untrusted.admin.listTopics({}).catch((e) => e), status.UNAVAILABLE);
      const err = await wrongName.admin.listTopics({}).catch((e) => e);
      assertCode(err, status.UNAVAILABLE);
      assert.match(err.details, /not-this-server\.example|altnames|certificate/i);
    } finally {
      untrusted.close();
      wrongName.close();
    }
  });

  test('no token (or an unknown one): UNAUTHENTICATED everywhere, not retried', async () => {
    const topic = unique('node-sec.anon');
    const counter = callCounter();
    const client = connect(server.address, { tls, channelOptions: { interceptors: [counter.interceptor] } });
    const publisher = new Publisher(client);
    const subscriber = new Subscriber(client);
    try {
      assertCode(await client.schedule(topic, Buffer.from('x'), { delay: 1000 }).catch((e) => e), status.UNAUTHENTICATED);
      assert.equal(counter.calls, 1, 'schedule() did not retry');
      assertCode(await client.admin.listTopics({}).catch((e) => e), status.UNAUTHENTICATED);

      const publishes = await Promise.allSettled(['a', 'b'].map((p) => publisher.publish(topic, Buffer.from(p))));
      for (const r of publishes) assertCode(r.reason, status.UNAUTHENTICATED);
      assert.equal(publisher.stats.retries, 0);
      assert.equal(publisher.stats.streams, 1);

      const sub = subscriber.subscribe(topic, 's', () => {});
      assertCode(await sub.closed.catch((e) => e), status.UNAUTHENTICATED);
      const calls = counter.calls;
      await new Promise((resolve) => setTimeout(resolve, 300)); // past the first reconnect backoff
      assert.equal(sub.stats.streams, 1, 'the subscription did not reopen its stream');
      assert.equal(counter.calls, calls);

      const unknown = connect(server.address, { tls, token: 'redq_0000000000unknown' });
      assertCode(await unknown.admin.listTopics({}).catch((e) => e), status.UNAUTHENTICATED);
      unknown.close();
    } finally {
      await publisher.close();
      await subscriber.close();
      client.close();
    }
  });

  test('a token without the grant: PERMISSION_DENIED, not retried', async () => {
    const topic = unique('node-sec.denied');
    const counter = callCounter();
    const token = server.tokens.viewer; // may view, not publish, subscribe or manage
    const client = connect(server.address, { tls, token, channelOptions: { interceptors: [counter.interceptor] } });
    const publisher = new Publisher(client);
    const subscriber = new Subscriber(client);
    try {
      const err = await client.schedule(topic, Buffer.from('x'), { delay: 1000 }).catch((e) => e);
      assertCode(err, status.PERMISSION_DENIED);
      assert.equal(err.codeName, 'PERMISSION_DENIED');
      assert.equal(counter.calls, 1, 'schedule() did not retry');
      assert.ok(!err.message.includes(token) && !inspect(err, { depth: 8 }).includes(token), 'the token is not in the error');
      assertCode(await client.admin.createTopic({ name: topic }).catch((e) => e), status.PERMISSION_DENIED);
      await client.admin.listTopics({}); // what it may do, it can

      assertCode(await publisher.publish(topic, Buffer.from('x')).catch((e) => e), status.PERMISSION_DENIED);
      assert.equal(publisher.stats.retries, 0);
      assert.equal(publisher.stats.requests, 1);

      const errors = [];
      const sub = subscriber.subscribe(topic, 's', () => {}, { onError: (e) => errors.push(e) });
      const refused = await sub.opened.then(() => 'opened', (e) => e);
      assertCode(refused, status.PERMISSION_DENIED);
      assert.equal(await sub.closed.catch((e) => e), refused, 'closed rejects with the same error');
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(sub.stats.streams, 1, 'the subscription did not reopen its stream');
      assert.deepEqual(errors, [], 'reported once: not to onError');
    } finally {
      await publisher.close();
      await subscriber.close();
      client.close();
    }
  });

  test('mTLS: the client certificate is accepted and stands for its token entry', async () => {
    const topic = unique('node-sec.mtls');
    const client = connect(server.address, { tls: { ...tls, cert: server.certs.clientCert, key: pemText(server.certs.clientKey) } });
    const publisher = new Publisher(client);
    try {
      const id = await publisher.publish(topic, Buffer.from('by certificate'));
      assert.match(id, /^\d+-\d+$/);
      assert.equal((await client.admin.getTopic({ name: topic })).stats.streamLength, 1);
    } finally {
      await publisher.close();
      client.close();
    }
  });

  // Last: it changes the server's tokens file.
  test('a revoked token stops the Subscriber with UNAUTHENTICATED and fails the Publisher, not retried', async () => {
    const topic = unique('node-sec.revoke');
    const client = connect(server.address, { tls, token: server.tokens.revoke });
    const publisher = new Publisher(client);
    const subscriber = new Subscriber(client);
    try {
      const received = [];
      const sub = subscriber.subscribe(topic, 's', (m) => {
        received.push(m.id);
      });
      await publisher.publish(topic, Buffer.from('before'));
      await waitFor(() => received.length === 1, 10_000, 'a message before the revocation');

      server.revoke('revoke'); // rewrites the file without it, then SIGHUP
      const err = await within(sub.closed.catch((e) => e), 10_000, 'the subscription to stop after the revocation');
      assertCode(err, status.UNAUTHENTICATED);
      assert.equal(sub.stats.streams, 1, 'not reopened');

      const retries = publisher.stats.retries;
      const after = await Promise.allSettled(['x', 'y', 'z'].map((p) => publisher.publish(topic, Buffer.from(p))));
      for (const r of after) assertCode(r.reason, status.UNAUTHENTICATED);
      assert.equal(publisher.stats.retries, retries, 'not retried');
    } finally {
      await publisher.close();
      await subscriber.close();
      client.close();
    }
  });
});
