// The test harness itself: test.sh runs the comparison with NATS and
// RabbitMQ only when they answer by their protocols (test-support/peers.js),
// so that another program holding 4222 or 5672 does not fail the run; and
// the servers the tests start listen on ports the system picks.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { answers } from '../test-support/peers.js';
import { startProxy, startSilentServer } from '../test-support/helpers.js';

/** A server on a free port that answers each connection with `reply` (at once, or to the first bytes it gets). */
async function server(reply, onData = false) {
  const s = net.createServer((socket) => {
    socket.on('error', () => {});
    if (onData) socket.once('data', () => socket.end(reply));
    else socket.end(reply);
    socket.resume(); // read what comes, so that the client's end closes the socket
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { port: s.address().port, close: () => new Promise((resolve) => s.close(resolve)) };
}

test('a port held by another program is not taken for NATS or RabbitMQ', async () => {
  const silent = await startSilentServer('tcp');
  const http = await server('HTTP/1.1 400 Bad Request\r\n\r\n', true);
  const nats = await server('INFO {"server_id":"fake"}\r\n');
  const amqp = await server(Buffer.from([1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 10, 0xce]), true);
  const port = (address) => Number(address.slice(address.lastIndexOf(':') + 1));
  try {
    for (const protocol of ['nats', 'amqp']) {
      assert.equal(await answers('127.0.0.1', port(silent.address), protocol, 300), false, `${protocol}: a silent server`);
      assert.equal(await answers('127.0.0.1', http.port, protocol, 1000), false, `${protocol}: an HTTP server`);
    }
    assert.equal(await answers('127.0.0.1', nats.port, 'nats'), true);
    assert.equal(await answers('127.0.0.1', amqp.port, 'amqp'), true);
    assert.equal(await answers('127.0.0.1', nats.port, 'amqp', 1000), false, 'NATS is not RabbitMQ');
  } finally {
    await Promise.all([silent.close(), http.close(), nats.close(), amqp.close()]);
  }
});

test('the proxy and the silent servers listen on ports the system picks', async () => {
  // Two of each at once get two ports: none is fixed.
  const proxies = await Promise.all([startProxy('127.0.0.1:1'), startProxy('127.0.0.1:1')]);
  const silents = await Promise.all([startSilentServer('tcp'), startSilentServer('http2')]);
  const addresses = [...proxies, ...silents].map((s) => s.address);
  assert.equal(new Set(addresses).size, 4, `${addresses}`);
  await Promise.all([...proxies, ...silents].map((s) => s.close()));
});
