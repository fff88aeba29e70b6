#!/usr/bin/env node
// redq beside NATS JetStream and RabbitMQ, from Node, in one run: rounds of
// `bench.js --only lib` (redq through this library) then `peers.js`, each
// with --runs 1, so that a machine whose speed drifts over the hour weighs on
// every system alike; then the median of the rounds for each system.
//
//   node bench/peers/compare.js --addr HOST:PORT --pids REDQ_PID,REDIS_PID
//                               [--rounds 3] [--count 100000] [--quick] [--json FILE]
//
// The server CPU of redq is that of `redq serve` and its redis-server
// together (--pids; without them, redq's is not shown); peers.js finds
// nats-server and beam.smp itself.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { fmt, median } from '../common.js';

const { values: opts } = parseArgs({
  options: {
    addr: { type: 'string', default: process.env.REDQ_ADDR },
    pids: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    count: { type: 'string', default: '100000' },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
if (!opts.addr) {
  console.error('compare: give --addr HOST:PORT of redq serve (and --pids REDQ_PID,REDIS_PID for its CPU)');
  process.exit(2);
}

const bench = (script) => fileURLToPath(new URL(script, import.meta.url));
const size = opts.quick ? ['--quick'] : ['--count', opts.count];
const scratch = mkdtempSync(join(tmpdir(), 'redq-compare-'));

/** Runs one benchmark script with --json and returns its rows. */
function runScript(script, args, file) {
  execFileSync(process.execPath, [bench(script), ...args, ...size, '--runs', '1', '--json', file], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return JSON.parse(readFileSync(file, 'utf8')).rows;
}

// One figure set per (workload, system) per round: throughput or latency, and
// the CPU per message of the client (both processes for e2e) and of the
// server side.
const figures = new Map();
const record = (workload, system, figure) => {
  const key = `${workload}\t${system}`;
  if (!figures.has(key)) figures.set(key, []);
  figures.get(key).push(figure);
};

const rounds = Number(opts.rounds);
for (let round = 1; round <= rounds; round++) {
  console.error(`compare: round ${round} of ${rounds}: redq`);
  const pids = opts.pids ? ['--pids', opts.pids] : [];
  for (const r of runScript('../bench.js', ['--addr', opts.addr, '--only', 'lib', ...pids], join(scratch, `redq-${round}.json`))) {
    const [redq, redis] = r.procUsPerMsg;
    const serverUs = opts.pids ? redq + redis : undefined;
    record(r.workload, 'redq', { msgPerSec: r.msgPerSec, p50Ms: r.p50Ms, p99Ms: r.p99Ms, clientUs: r.cpuUsPerMsg, serverUs, redqUs: redq, redisUs: redis });
  }
  console.error(`compare: round ${round} of ${rounds}: JetStream and RabbitMQ`);
  for (const r of runScript('peers.js', [], join(scratch, `peers-${round}.json`))) {
    record(r.workload, r.system, { msgPerSec: r.msgPerSec, p50Ms: r.p50Ms, p99Ms: r.p99Ms, clientUs: r.cpuUsPerMsg, serverUs: r.serverUsPerMsg });
  }
}
rmSync(scratch, { recursive: true, force: true });

const SYSTEMS = ['redq', 'nats', 'rabbitmq'];
const LABELS = { redq: 'redq (library)', nats: 'JetStream', rabbitmq: 'RabbitMQ' };
const mid = (runs, field) => median(runs.map((f) => f[field]));
const cell = (workload, system) => {
  const runs = figures.get(`${workload}\t${system}`) ?? [];
  if (runs.length === 0) return '–';
  const main = workload === 'e2e-2000' ? `${fmt(mid(runs, 'p50Ms'), 3)} / ${fmt(mid(runs, 'p99Ms'), 3)} ms` : `${fmt(mid(runs, 'msgPerSec'))} msg/s`;
  const server = mid(runs, 'serverUs');
  const cpu = `client ${fmt(mid(runs, 'clientUs'), 1)}${server === undefined ? '' : `, server ${fmt(server, 1)}`} µs/msg`;
  return `${main}; ${cpu}`;
};
const workloads = [...new Set([...figures.keys()].map((k) => k.split('\t')[0]))];
const lines = [
  `${opts.quick ? 2000 : Number(opts.count)} messages of 100 bytes, median of ${rounds} round(s); e2e: p50 / p99; CPU: user + system`,
  '',
  `| workload | ${SYSTEMS.map((s) => LABELS[s]).join(' | ')} |`,
  `|---|${SYSTEMS.map(() => '---').join('|')}|`,
  ...workloads.map((w) => `| ${w} | ${SYSTEMS.map((s) => cell(w, s)).join(' | ')} |`),
];
const e2e = figures.get('e2e-2000\tredq');
if (e2e && opts.pids) lines.push('', `redq e2e server CPU: redq ${fmt(mid(e2e, 'redqUs'), 1)} + Redis ${fmt(mid(e2e, 'redisUs'), 1)} µs/msg`);
console.log(lines.join('\n'));
if (opts.json) writeFileSync(opts.json, JSON.stringify({ rounds, figures: Object.fromEntries(figures) }, null, 2));
