// TLS and tokens: the channel credentials of a Client's `tls` option (and of
// an `https://` address), and the interceptor that adds the `token` as
// `authorization: Bearer <token>` metadata to every call and stream.
//
// The token goes in an interceptor rather than in call credentials because
// grpc-js refuses call credentials on a plaintext channel, and a redq server
// may check tokens without TLS (say `redq dev --auth-tokens-file`): like the
// redq CLI, the library sends the token either way. The token is kept only
// in the interceptor's closure (not on the Client, so it shows in no
// console.log or util.inspect), and no error message includes it.

import { readFileSync } from 'node:fs';
import grpc from '@grpc/grpc-js';
import { checkOptions } from './util.js';

/** The names of the `tls` options (index.d.ts: TlsOptions). */
const TLS_OPTIONS = Object.freeze(['ca', 'cert', 'key', 'serverName']);

/**
 * PEM bytes of a Buffer / Uint8Array, of PEM text, or read from a path.
 * Errors name the option and the path, never the contents.
 */
export function readPem(value, what) {
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (typeof value === 'string' && value !== '') {
    if (value.includes('-----BEGIN ')) return Buffer.from(value);
    try {
      return readFileSync(value);
    } catch (err) {
      throw new TypeError(`tls.${what}: cannot read ${value}: ${err.code ?? err.message}`);
    }
  }
  throw new TypeError(`tls.${what}: must be PEM (a Buffer or a string) or the path of a PEM file`);
}

/**
 * Splits an `https://host:port` or `http://host:port` address into the
 * gRPC target (host:port) and whether the scheme asks for TLS (undefined
 * without a scheme).
 */
export function parseAddress(address) {
  const m = /^(https?):\/\/([^/]+)\/?$/i.exec(address);
  if (m === null) {
    if (address.includes('://')) throw new TypeError(`address: ${address}: give host:port, https://host:port or http://host:port`);
    return { target: address, tls: undefined };
  }
  return { target: m[2], tls: m[1].toLowerCase() === 'https' };
}

/**
 * Channel credentials and extra channel options of the Client options
 * `tls` and `credentials`, for a target whose scheme said `schemeTls`.
 * @returns {{credentials: grpc.ChannelCredentials, channelOptions: object}}
 */
export function channelSecurity({ tls, credentials }, schemeTls) {
  if (tls !== undefined && tls !== null && tls !== false && tls !== true && (typeof tls !== 'object' || Array.isArray(tls))) {
    throw new TypeError('tls: must be true, false, or { ca, cert, key, serverName }');
  }
  const wantsTls = tls === undefined || tls === null ? schemeTls === true : tls !== false;
  if (schemeTls === false && wantsTls) throw new TypeError('tls: the address is http:// (plaintext); use https:// or drop tls');
  if (schemeTls === true && tls === false) throw new TypeError('tls: false, but the address is https://');
  if (credentials !== undefined && credentials !== null) {
    if (wantsTls) throw new TypeError('give credentials or tls (or an https:// address), not both');
    return { credentials, channelOptions: {} };
  }
  if (!wantsTls) return { credentials: grpc.credentials.createInsecure(), channelOptions: {} };
  const { ca, cert, key, serverName } = checkOptions(typeof tls === 'object' ? tls : null, TLS_OPTIONS, 'tls options');
  if ((cert == null) !== (key == null)) throw new TypeError('tls: give cert and key together (the client certificate of mTLS)');
  const channelOptions = {};
  if (serverName != null) {
    if (typeof serverName !== 'string' || serverName === '') throw new TypeError('tls.serverName: must be a host name');
    // The name the server's certificate is checked against (and sent as SNI)
    // instead of the address' host: say 'localhost' for a server at 127.0.0.1.
    channelOptions['grpc.ssl_target_name_override'] = serverName;
  }
  return {
    // No ca: Node's default roots (and NODE_EXTRA_CA_CERTS).
    credentials: grpc.credentials.createSsl(
      ca == null ? null : readPem(ca, 'ca'),
      key == null ? null : readPem(key, 'key'),
      cert == null ? null : readPem(cert, 'cert'),
    ),
    channelOptions,
  };
}

/**
 * A grpc-js client interceptor that sets `authorization: Bearer <token>` on
 * every call (unary and streaming), or null without a token.
 */
export function tokenInterceptor(token) {
  if (token === undefined || token === null) return null;
  // Visible ASCII only: a header value cannot hold a newline, and a token
  // with spaces or control characters is a copy-paste accident.
  if (typeof token !== 'string' || !/^[!-~]+$/.test(token)) {
    throw new TypeError('token: must be a non-empty string of visible ASCII characters');
  }
  const authorization = `Bearer ${token}`;
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set('authorization', authorization);
        next(metadata, listener);
      },
    });
}
