#!/usr/bin/env node
// Whether NATS and RabbitMQ answer, by their protocols rather than by an
// open port: test.sh runs the comparison with them (bench/peers/compare.js)
// only then, so that another program holding 4222 or 5672 skips it instead
// of failing it. A NATS server greets a new connection with `INFO {…}`; a
// RabbitMQ (AMQP 0-9-1) server answers the protocol header with a method
// frame (type 1, connection.start).
//
//   node test-support/peers.js   exits 0 when both answer (NATS_URL's and
//                                AMQP_URL's host and port, by default
//                                127.0.0.1:4222 and 127.0.0.1:5672), else 1

import net from 'node:net';
import { fileURLToPath } from 'node:url';

const AMQP_HEADER = Buffer.from([0x41, 0x4d, 0x51, 0x50, 0, 0, 9, 1]); // "AMQP" 0-9-1

/**
 * Whether the server at host:port speaks `protocol` ('nats' or 'amqp'):
 * its first bytes, within `timeout` ms, are those of the protocol.
 * @returns {Promise<boolean>}
 */
export function answers(host, port, protocol, timeout = 2000) {
  return new Promise((resolve) => {
    const socket = net.connect(port, host);
    let received = Buffer.alloc(0);
    const done = (ok) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeout);
    socket.on('error', () => done(false));
    socket.on('close', () => done(false));
    if (protocol === 'amqp') socket.on('connect', () => socket.write(AMQP_HEADER));
    socket.on('data', (chunk) => {
      received = Buffer.concat([received, chunk]);
      if (protocol === 'nats') {
        if (received.length >= 5) done(received.subarray(0, 5).toString('latin1') === 'INFO ');
      } else if (received.length >= 1) {
        done(received[0] === 1);
      }
    });
  });
}

/** host and port of a URL such as nats://host:4222, amqp://user:pass@host:5672 or host:port. */
export function hostPort(url, defaultPort) {
  const parsed = new URL(url.includes('://') ? url : `tcp://${url}`);
  return { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || defaultPort) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const nats = hostPort(process.env.NATS_URL ?? '127.0.0.1:4222', 4222);
  const amqp = hostPort(process.env.AMQP_URL ?? '127.0.0.1:5672', 5672);
  const [natsOk, amqpOk] = await Promise.all([answers(nats.host, nats.port, 'nats'), answers(amqp.host, amqp.port, 'amqp')]);
  if (!natsOk) console.log(`peers: no NATS server answers on ${nats.host}:${nats.port}`);
  if (!amqpOk) console.log(`peers: no AMQP server answers on ${amqp.host}:${amqp.port}`);
  process.exit(natsOk && amqpOk ? 0 : 1);
}
