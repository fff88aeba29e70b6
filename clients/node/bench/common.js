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
