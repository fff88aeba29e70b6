// Client: one gRPC channel to a redq server, shared by the publishers,
// subscribers and the admin client made from it; also the unary calls for
// scheduled messages (schedule, cancel, reschedule).
//
// The protos are loaded at run time from the package's own proto/ folder
// (copies of the repository's, kept equal by scripts/sync-protos.js), so the
// source tree and an installed tarball read the same files: proto-loader for
// the unary RPCs and AdminService, and the hand-written codec of codec.js for
// the two streaming RPCs.

import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import { AdminClient } from './admin.js';
import { RedqError, isRetryable } from './errors.js';
import { channelSecurity, parseAddress, tokenInterceptor } from './security.js';
import { backoffDelay, sleep, toDuration, toTimestamp, fromTimestamp, toPayload, checkOptions, checkTime } from './util.js';

/** The names of the Client options (index.d.ts: ClientOptions). */
export const CLIENT_OPTIONS = Object.freeze(['token', 'tls', 'credentials', 'channelOptions', 'callTimeout', 'maxRetries']);
/** The names of schedule()'s options (index.d.ts: ScheduleOptions). */
export const SCHEDULE_OPTIONS = Object.freeze(['delay', 'deliverAt', 'attributes', 'orderingKey', 'dedupeId']);
const RESCHEDULE_OPTIONS = Object.freeze(['delay', 'deliverAt']);

/** Where the .proto files are: the package's proto/ folder. */
export const PROTO_DIR = fileURLToPath(new URL('../proto/', import.meta.url));

const LOADER_OPTIONS = {
  includeDirs: [PROTO_DIR],
  keepCase: false, // camelCase fields, as JavaScript writes them
  longs: Number, // counters and seconds fit in a double
  enums: String,
  defaults: true,
};

let loaded = null;
/** The proto-loader package definition of queue.proto, admin.proto and google/rpc/status.proto. */
export function loadProtos() {
  if (loaded === null) {
    const definition = protoLoader.loadSync(
      ['redq/v1/queue.proto', 'redq/v1/admin.proto', 'google/rpc/status.proto'],
      LOADER_OPTIONS,
    );
    loaded = { definition, v1: grpc.loadPackageDefinition(definition).redq.v1 };
  }
  return loaded;
}

/**
 * Channel options: no receive limit (a SubscribeResponse may hold many large
 * messages), keepalive pings to notice a dead connection on an idle stream,
 * and an 8 MiB HTTP/2 window so a burst of deliveries is not throttled by the
 * default 64 KiB one. grpc-js' own retries stay off: the library retries,
 * with dedupe ids, and they would only buffer every streamed message. So does
 * channelz, which stamps a Date on every message sent and received.
 */
export const DEFAULT_CHANNEL_OPTIONS = Object.freeze({
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc-node.flow_control_window': 8 * 1024 * 1024,
  'grpc.enable_retries': 0,
  'grpc.enable_channelz': 0,
});

/** A random prefix for automatic dedupe ids, unique per publisher or client. */
export function dedupePrefix() {
  return `${randomBytes(12).toString('base64url')}-`;
}

export class Client {
  /**
   * @param {string} address host:port of a redq server, or https://host:port (TLS) / http://host:port
   * @param {object} [options]
   * @param {string} [options.token] sent as `authorization: Bearer <token>` on every call and stream
   * @param {boolean|{ca?: string|Buffer, cert?: string|Buffer, key?: string|Buffer, serverName?: string}} [options.tls]
   *   true: TLS with Node's default roots; an object: `ca` the root CA (PEM, or a path), `cert` + `key`
   *   the client certificate of mTLS (PEM, or paths), `serverName` the name the server's certificate
   *   must have when it is not the address' host. Default: plaintext (TLS for an https:// address).
   * @param {grpc.ChannelCredentials} [options.credentials] grpc-js credentials instead of `tls` (default: plaintext)
   * @param {object} [options.channelOptions] grpc-js channel options, over DEFAULT_CHANNEL_OPTIONS
   * @param {number} [options.callTimeout] deadline of each unary call in ms (default 10000)
   * @param {number} [options.maxRetries] retries of schedule() on UNAVAILABLE (default 5)
   */
  constructor(address, options) {
    if (typeof address !== 'string' || address === '') throw new TypeError('address: must be host:port');
    options = checkOptions(options, CLIENT_OPTIONS, 'Client options');
    const { definition, v1 } = loadProtos();
    const { target, tls: schemeTls } = parseAddress(address);
    this.address = target;
    this.callTimeout = options.callTimeout ?? 10_000;
    this.maxRetries = options.maxRetries ?? 5;
    const security = channelSecurity(options, schemeTls);
    const credentials = security.credentials;
    const channelOptions = { ...DEFAULT_CHANNEL_OPTIONS, ...security.channelOptions, ...options.channelOptions };
    // The token interceptor runs after any the caller gave in channelOptions.
    const interceptors = [...(channelOptions.interceptors ?? [])];
    const withToken = tokenInterceptor(options.token);
    if (withToken !== null) interceptors.push(withToken);
    channelOptions.interceptors = interceptors;
    /** Whether the channel uses TLS. */
    this.tls = security.credentials._isSecure();
    /** The QueueService stub (grpc-js, proto-loader), for calls the library does not wrap. */
    this.queueStub = new v1.QueueService(target, credentials, channelOptions);
    /** The AdminService stub, on the same channel (and with the same interceptors). */
    this.adminStub = new v1.AdminService(target, credentials, { channelOverride: this.queueStub.getChannel(), interceptors });
    /** The AdminService, with promise-returning methods. */
    this.admin = new AdminClient(this, definition);
    this._dedupePrefix = dedupePrefix();
    this._dedupeSeq = 0;
    this._closed = false;
  }

  /** Waits until the channel is connected, for at most `timeout` ms. */
  waitForReady(timeout = this.callTimeout) {
    return new Promise((resolve, reject) => {
      this.queueStub.waitForReady(Date.now() + timeout, (err) =>
        err ? reject(new RedqError(grpc.status.UNAVAILABLE, `could not connect to ${this.address}: ${err.message}`)) : resolve(),
      );
    });
  }

  /**
   * Calls a unary method of a stub with the client's deadline.
   * @returns {Promise<object>} the response, or rejects with a RedqError
   */
  unary(stub, method, request, timeout = this.callTimeout) {
    return new Promise((resolve, reject) => {
      stub[method](request, { deadline: Date.now() + timeout }, (err, response) =>
        err ? reject(RedqError.from(err)) : resolve(response),
      );
    });
  }

  /**
   * Schedules one message: delivered after `delay` ms or at `deliverAt`
   * (exactly one). Retried on UNAVAILABLE with an automatic dedupe id.
   * @param {string} topic
   * @param {Buffer|Uint8Array} payload
   * @param {object} options delay or deliverAt, attributes, orderingKey, dedupeId
   * @returns {Promise<{id: string, deliverAt: Date, duplicate: boolean}>}
   */
  async schedule(topic, payload, options) {
    options = checkOptions(options, SCHEDULE_OPTIONS, 'schedule options');
    const { delay, deliverAt } = options;
    checkTime(delay, deliverAt, true);
    const request = {
      topic,
      message: {
        payload: toPayload(payload),
        attributes: options.attributes ?? {},
        orderingKey: options.orderingKey ?? '',
        dedupeId: options.dedupeId ?? `${this._dedupePrefix}${(this._dedupeSeq++).toString(36)}`,
      },
      delay: delay === undefined ? null : toDuration(delay),
      deliverAt: deliverAt === undefined ? null : toTimestamp(deliverAt),
    };
    const response = await this._retrying(() => this.unary(this.queueStub, 'ScheduleDelayed', request));
    return { id: response.messageId, deliverAt: fromTimestamp(response.deliverAt), duplicate: response.duplicate };
  }

  /**
   * Cancels a scheduled message not yet due.
   * @returns {Promise<boolean>} false when already delivered, cancelled, or unknown
   */
  async cancel(topic, messageId) {
    const response = await this.unary(this.queueStub, 'CancelScheduled', { topic, messageId });
    return response.cancelled;
  }

  /**
   * Moves a scheduled message not yet due to `delay` ms from now or to `deliverAt`.
   * @returns {Promise<{rescheduled: boolean, deliverAt: Date|null}>}
   */
  async reschedule(topic, messageId, when) {
    const { delay, deliverAt } = checkOptions(when, RESCHEDULE_OPTIONS, 'reschedule options');
    checkTime(delay, deliverAt, true);
    const response = await this.unary(this.queueStub, 'RescheduleDelayed', {
      topic,
      messageId,
      delay: delay === undefined ? null : toDuration(delay),
      deliverAt: deliverAt === undefined ? null : toTimestamp(deliverAt),
    });
    return { rescheduled: response.rescheduled, deliverAt: response.rescheduled ? fromTimestamp(response.deliverAt) : null };
  }

  async _retrying(call) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!isRetryable(err.code) || attempt > this.maxRetries || this._closed) throw err;
        await sleep(backoffDelay(attempt, 100, 5000));
      }
    }
  }

  /** Closes the channel; calls in progress fail with CANCELLED. */
  close() {
    this._closed = true;
    this.adminStub.close();
    this.queueStub.close();
  }
}

/**
 * The Client of a Publisher or Subscriber: `client` itself, or one opened
 * on the address `client` with `options.clientOptions` and the shorthands
 * `options.token` and `options.tls`. Those two belong to the Client: given
 * a Client, they are refused rather than ignored.
 * @returns {{client: Client, owns: boolean}}
 */
export function clientOf(client, options, what) {
  const { token, tls } = options;
  if (typeof client === 'string') {
    const clientOptions = { ...options.clientOptions };
    if (token !== undefined) clientOptions.token = token;
    if (tls !== undefined) clientOptions.tls = tls;
    return { client: new Client(client, clientOptions), owns: true };
  }
  if (!(client instanceof Client)) throw new TypeError('client: must be a Client or an address');
  if (token !== undefined || tls !== undefined) {
    throw new TypeError(`${what} was given a Client: set token and tls on the Client (connect(address, { token, tls }))`);
  }
  return { client, owns: false };
}

/** Opens a Client (the channel connects on first use). */
export function connect(address, options) {
  return new Client(address, options);
}
