// A secured redq for test/security.test.js: `redq dev` (its own redis-server
// under a temporary folder) with TLS, optional mTLS and a tokens file. The
// certificates are made with openssl: a CA, a server certificate for
// DNS:localhost and IP:127.0.0.1, and a client certificate (CN=node-client).

import { spawn, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The redq binary: $REDQ_BIN, else the repository's target/debug/redq, else /tmp/redq-bin/redq; null if none exists. */
export function redqBinary() {
  const candidates = [
    process.env.REDQ_BIN,
    fileURLToPath(new URL('../../../target/debug/redq', import.meta.url)),
    '/tmp/redq-bin/redq',
  ];
  return candidates.find((path) => path && existsSync(path)) ?? null;
}

const sha256 = (text) => createHash('sha256').update(text).digest('hex');

function openssl(dir, ...args) {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A CA, a server certificate (localhost, 127.0.0.1) and a client certificate (CN=node-client), in `dir`. */
function makeCertificates(dir) {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(dir, 'req', '-x509', '-new', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=redq-node-test-ca',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  const sign = (name, subject, extensions) => {
    writeFileSync(join(dir, `${name}.ext`), `${extensions.join('\n')}\n`);
    openssl(dir, 'req', '-new', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject);
    openssl(dir, 'x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
      '-out', `${name}.crt`, '-extfile', `${name}.ext`);
  };
  sign('server', '/CN=localhost', [
    'subjectAltName=DNS:localhost,IP:127.0.0.1', 'extendedKeyUsage=serverAuth',
    'basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature',
  ]);
  sign('client', '/CN=node-client', [
    'extendedKeyUsage=clientAuth', 'basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature',
  ]);
  return {
    ca: join(dir, 'ca.crt'),
    serverCert: join(dir, 'server.crt'),
    serverKey: join(dir, 'server.key'),
    clientCert: join(dir, 'client.crt'),
    clientKey: join(dir, 'client.key'),
  };
}

/**
 * The tokens of the test server, by name: `good` may publish, subscribe and
 * view the topics `node-sec.>`; `viewer` may only view; `revoke` is like
 * `good`, for the revocation test. The client certificate CN=node-client
 * has good's grants.
 */
function tokenEntries(tokens) {
  const grants = [{ topics: ['node-sec.>'], actions: ['publish', 'subscribe', 'view'] }];
  return {
    good: { name: 'node-good', sha256: sha256(tokens.good), grants },
    viewer: { name: 'node-viewer', sha256: sha256(tokens.viewer), grants: [{ topics: ['>'], actions: ['view'] }] },
    revoke: { name: 'node-revoke', sha256: sha256(tokens.revoke), grants },
    cert: { name: 'node-cert', client_cert: 'CN=node-client', grants },
  };
}

/**
 * Starts `redq dev` with TLS, optional client certificates and a tokens
 * file, on free ports. Resolves when it serves.
 * @returns {Promise<{address, metrics, certs, tokens, revoke(name), stop()}>}
 */
export async function startSecureServer(bin) {
  const dir = mkdtempSync(join(tmpdir(), 'redq-node-sec-'));
  const certs = makeCertificates(dir);
  const tokens = { good: `redq_${randomBytes(32).toString('hex')}`, viewer: `redq_${randomBytes(32).toString('hex')}`, revoke: `redq_${randomBytes(32).toString('hex')}` };
  const entries = tokenEntries(tokens);
  const tokensFile = join(dir, 'tokens.json');
  const writeTokens = () => writeFileSync(tokensFile, JSON.stringify({ tokens: Object.values(entries) }));
  writeTokens();

  const redq = spawn(bin, [
    'dev', '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0', '--dir', join(dir, 'dev'),
    '--tls-cert', certs.serverCert, '--tls-key', certs.serverKey,
    '--tls-client-ca', certs.ca, '--tls-client-auth', 'optional',
    '--auth-tokens-file', tokensFile,
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  // Keep reading the log (a full pipe would block the server); keep its end for errors.
  redq.stderr.on('data', (chunk) => {
    log = (log + chunk).slice(-20_000);
  });
  let exited = false;
  const exit = new Promise((resolve) => redq.on('exit', () => {
    exited = true;
    resolve();
  }));
  const cleanup = () => {
    if (!exited) redq.kill('SIGINT'); // redq dev stops its redis-server on SIGINT
  };
  process.on('exit', cleanup);

  const { address, metrics } = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redq dev did not start in 15 s: ${log}`)), 15_000);
    const onData = () => {
      const m = /grpc_addr=(\S+) metrics_addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        redq.stderr.off('data', onData);
        resolve({ address: m[1], metrics: m[2] });
      }
    };
    redq.stderr.on('data', onData);
    exit.then(() => {
      clearTimeout(timer);
      reject(new Error(`redq dev exited (${redq.exitCode ?? redq.signalCode}): ${log}`));
    });
  });

  return {
    /** host:port of the gRPC port (TLS). */
    address,
    metrics,
    certs,
    /** The tokens themselves: good, viewer, revoke. */
    tokens,
    get log() {
      return log;
    },
    /** Removes a token (by key of `tokens`) from the file and has the server reload it at once. */
    revoke(name) {
      delete entries[name];
      writeTokens();
      redq.kill('SIGHUP');
    },
    /** Stops the server (SIGINT, then SIGKILL after 5 s) and removes its folder. */
    async stop() {
      process.off('exit', cleanup);
      if (!exited) {
        redq.kill('SIGINT');
        const timer = setTimeout(() => redq.kill('SIGKILL'), 5_000);
        await exit;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The PEM text of a file (to pass certificates as contents rather than paths). */
export const pemText = (path) => readFileSync(path, 'utf8');
