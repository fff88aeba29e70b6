// Shared by bench.js and consumer.js: the raw grpc-js stubs (the old unary
// API, as an application without this library would call it), CPU
// accounting, payloads and percentiles.

import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import grpc from '@grpc/grpc-js';
import { loadProtos } from '../index.js';

/** QueueService stubs from proto-loader on a channel of grpc-js defaults (bar the receive limit). */
export function rawStub(addr) {
  const { v1 } = loadProtos();
  return new v1.QueueService(addr, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 });
}

/** A unary call as a promise. */
export function unary(stub, method, request) {
  return new Promise((resolve, reject) => stub[method](request, (err, res) => (err ? reject(err) : resolve(res))));
}

/** CPU time of this process so far, in µs (user + system). */
export function cpuNow() {
  const { user, system } = process.cpuUsage();
  return user + system;
}

let ticksPerSecond = null;
/** CPU time of another process so far (utime + stime of /proc/PID/stat), in µs. */
export function procCpu(pid) {
  ticksPerSecond ??= Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces), from field 3 on.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) / ticksPerSecond) * 1e6;
}

/** payload[8] of an end-to-end warm-up message, and of a measured one. */
export const WARM = 0x57;
export const MEASURED = 0x4d;

/** A 100-byte payload whose first 8 bytes hold `stamp` (a float64, ms). */
export function stampedPayload(stamp, size = 100) {
  const buf = Buffer.alloc(size, 0x61);
  buf.writeDoubleLE(stamp, 0);
  return buf;
}

/**
 * Ms with a fraction on the machine's monotonic clock, which every process
 * shares. Not the wall clock: `performance.timeOrigin` is read once per
 * process, so a wall clock the VM steps afterwards skews one process against
 * the other (a median latency of -0.75 ms was measured that way).
 */
export const sharedClock = () => Number(process.hrtime.bigint()) / 1e6;

/** The q-quantile (0..1) of sorted numbers. */
export function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

/** The median of numbers, those undefined or NaN left out. */
export function median(xs) {
  const s = xs.filter((x) => x !== undefined && !Number.isNaN(x)).sort((a, b) => a - b);
  return s.length === 0 ? undefined : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** A figure for the tables ('' when missing). */
export const fmt = (x, digits = 0) => (x === undefined ? '' : x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

// ------------------------------------------------------ end to end, both sides

/** The messages a forked child sends: `next(type)` resolves with the first of that type. */
export function inbox(child) {
  const messages = [];
  let arrived = null;
  child.on('message', (msg) => {
    messages.push(msg);
    arrived?.();
  });
  return async function next(type) {
    for (;;) {
      const msg = messages.find((m) => m.type === type);
      if (msg) return msg;
      await new Promise((resolve) => (arrived = resolve));
    }
  };
}

/** Publishes warm-up messages, one per 10 ms at most, until `warm` resolves (the consumer saw one). */
export async function warmUp(publish, warm) {
  let warmed = false;
  warm.then(() => (warmed = true));
  while (!warmed) {
    const payload = stampedPayload(sharedClock());
    payload[8] = WARM;
    await publish(payload);
    await Promise.race([warm, new Promise((resolve) => setTimeout(resolve, 10))]);
  }
}

/**
 * Publishes `count` measured messages at a steady `rate` (msg/s): on each
 * timer tick, what is due by now, each stamped just before its publish; then
 * waits for all of them.
 */
export async function publishAtRate(publish, count, rate) {
  const start = performance.now();
  const pending = [];
  for (let sent = 0; sent < count; ) {
    const due = Math.min(count, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    while (sent < due) {
      const payload = stampedPayload(sharedClock());
      payload[8] = MEASURED;
      pending.push(publish(payload));
      sent++;
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await Promise.all(pending);
}

/**
 * The consumer's side, in a forked process: `onPayload` is called with each
 * payload as it reaches the handler. It tells the parent once a warm-up
 * message came through ('warm'), counts CPU from the parent's 'start', and
 * `report` resolves once `count` measured messages came, with the
 * percentiles of handler time minus each one's stamp and this process's CPU
 * time (what it also sends the parent as 'done').
 */
export function latencyRecorder(count) {
  const latencies = new Float64Array(count);
  let n = 0;
  let warm = false;
  let cpuStart = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  process.on('message', (msg) => {
    if (msg.type === 'start') cpuStart = cpuNow();
  });
  const onPayload = (payload) => {
    const now = sharedClock();
    if (payload[8] === WARM) {
      if (!warm) {
        warm = true;
        process.send({ type: 'warm' });
      }
      return;
    }
    if (n < count) latencies[n++] = now - payload.readDoubleLE(0);
    if (n === count) finish();
  };
  const report = finished.then(() => {
    const cpuUs = cpuNow() - cpuStart;
    const sorted = Array.from(latencies).sort((a, b) => a - b);
    const done = { type: 'done', p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted[sorted.length - 1], cpuUs };
    process.send(done);
    return done;
  });
  return { onPayload, report };
}
