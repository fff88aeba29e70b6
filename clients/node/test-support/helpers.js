// Test helpers (outside test/, so that `node --test` does not take this file
// for a test): the redq server to test against (REDQ_ADDR, or a private
// redis-server + redq started for the test file when it is unset), unique
// topic names, bounded waits, a TCP proxy that can hold back the server's
// answers or cut connections, to break streams for real, and servers that
// accept connections and never answer. Every server here listens on a port
// the system picks (port 0) and reads it back, so none fails because another
// program holds a port.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import http2 from 'node:http2';
import { randomBytes } from 'node:crypto';

const REDQ_BIN = process.env.REDQ_BIN ?? '/tmp/redq-bin/redq';

let server = null;

/**
 * The address of the server to test against: $REDQ_ADDR, or one started
 * for this process (stopped when its tests are done).
 */
export async function serverAddress() {
  if (process.env.REDQ_ADDR) return process.env.REDQ_ADDR;
  server ??= startServer();
  return server;
}

async function startServer() {
  // REDQ_BIN, else the binary the lead builds into /tmp/redq-bin.
  const dir = mkdtempSync(join(tmpdir(), 'redq-node-test-'));
  execFileSync('redis-server', [
    '--port', '0', '--unixsocket', join(dir, 'r.sock'), '--save', '', '--appendonly', 'no',
    '--daemonize', 'yes', '--pidfile', join(dir, 'r.pid'), '--dir', dir,
  ]);
  const redq = spawn(
    REDQ_BIN,
    ['serve', '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0', '--redis-url', `unix://${join(dir, 'r.sock')}`],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  // On exit rather than in an after() hook: this runs inside the test
  // file's before() hook, and the server must outlive every test of the file.
  process.on('exit', () => {
    redq.kill();
    try {
      process.kill(Number(readFileSync(join(dir, 'r.pid'), 'utf8')));
    } catch {
      // already gone
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const { grpc, metrics } = await new Promise((resolve, reject) => {
    let log = '';
    const timer = setTimeout(() => reject(new Error(`redq did not start: ${log}`)), 10_000);
    redq.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /grpc_addr=(\S+) metrics_addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        // Let the test process end when its tests are done (then 'exit' stops the server).
        redq.unref();
        redq.stderr.unref();
        resolve({ grpc: m[1], metrics: m[2] });
      }
    });
    redq.on('exit', (code) => reject(new Error(`redq exited (${code}): ${log}`)));
  });
  await waitFor(async () => (await fetch(`http://${metrics}/readyz`).catch(() => null))?.ok, 10_000, 'redq ready');
  return grpc;
}

/** A topic (or subscription) name no other test run uses. */
export function unique(prefix) {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

/** Polls `predicate` (sync or async) every 20 ms until it is truthy; throws after `timeout` ms. */
export async function waitFor(predicate, timeout = 10_000, what = 'condition') {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * A TCP proxy to `target` (host:port) on a local port. hold() stops
 * passing the server's bytes to the client, release() passes them again
 * (those held back first); cut() destroys every connection (the client sees
 * a broken connection and reconnects).
 */
export async function startProxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const pairs = new Set();
  let holding = false;
  const proxy = net.createServer((client) => {
    const upstream = net.connect(port, host);
    const pair = { client, upstream };
    pairs.add(pair);
    client.pipe(upstream);
    if (holding) upstream.pause();
    else upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${proxy.address().port}`,
    get connections() {
      return pairs.size;
    },
    hold() {
      holding = true;
      for (const { upstream } of pairs) {
        upstream.unpipe();
        upstream.pause();
      }
    },
    release() {
      holding = false;
      for (const { client, upstream } of pairs) upstream.pipe(client);
    },
    cut() {
      holding = false;
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    close() {
      this.cut();
      return new Promise((resolve) => proxy.close(resolve));
    },
  };
}

/**
 * A server that never answers, on a local port: `tcp` accepts connections
 * and says nothing (not even HTTP/2's settings); `http2` speaks HTTP/2 and
 * takes every stream, but never sends its headers.
 * @param {'tcp'|'http2'} kind
 * @returns {Promise<{address: string, close(): Promise<void>}>}
 */
export async function startSilentServer(kind) {
  const sockets = new Set();
  const server = kind === 'http2' ? http2.createServer() : net.createServer();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
  });
  if (kind === 'http2') {
    server.on('stream', (stream) => stream.on('error', () => {})); // kept open, unanswered
  }
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The outcome of `promise` as {value} or {error}, or throws if it does not
 * settle within `ms` (a test of something that must not hang fails instead).
 */
export async function settled(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise.then((value) => ({ value }), (error) => ({ error })), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
