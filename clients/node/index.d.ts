// TypeScript declarations of the redq package (hand-written; the code is
// plain JavaScript in index.js and lib/). Times are milliseconds: `delay`,
// `ackDeadline`, backoffs, `timeout`; `deliverAt` is a Date or ms since the
// epoch. The options interfaces are the lists of known names: an options
// object with another name is refused with a TypeError (test/options.test.js
// checks that the library and this file agree).

import type { ChannelCredentials, ChannelOptions, Client as GrpcClient, status as grpcStatus } from '@grpc/grpc-js';
import type { PackageDefinition } from '@grpc/proto-loader';

/** gRPC status codes (grpc-js' `status` enum). */
export declare const status: typeof grpcStatus;

/**
 * Where the .proto files are loaded from: the package's own `proto/` folder
 * (`redq/v1/queue.proto`, `redq/v1/admin.proto`, `google/rpc/status.proto`),
 * shipped in the package; an absolute path.
 */
export declare const PROTO_DIR: string;

/** The channel options every Client starts from (overridable with `channelOptions`). */
export declare const DEFAULT_CHANNEL_OPTIONS: Readonly<ChannelOptions>;

/** The proto-loader package definition of queue.proto, admin.proto and google/rpc/status.proto. */
export declare function loadProtos(): { definition: PackageDefinition; v1: Record<string, any> };

/** Bytes of a payload. A string is refused (a TypeError): encode it, e.g. Buffer.from(text). */
export type Payload = Buffer | Uint8Array;

/** The error every call rejects with. */
export declare class RedqError extends Error {
  constructor(code: number, details: string, extra?: { cause?: unknown; metadata?: unknown });
  /** Numeric gRPC status code, e.g. 3 (status.INVALID_ARGUMENT). */
  readonly code: number;
  /** Its name, e.g. 'INVALID_ARGUMENT'. */
  readonly codeName: string;
  /** The server's message alone, e.g. 'topic: must match …'. */
  readonly details: string;
  /** Trailing metadata of the call, when the error came from one. */
  readonly metadata?: unknown;
  static from(err: unknown): RedqError;
}

/** TLS of a Client: PEM contents (a Buffer, or a string starting `-----BEGIN `) or the path of a PEM file. */
export interface TlsOptions {
  /** Root CA(s) the server's certificate must chain to (default: Node's roots, plus NODE_EXTRA_CA_CERTS). */
  ca?: Buffer | Uint8Array | string;
  /** Client certificate chain, for mTLS (with `key`). */
  cert?: Buffer | Uint8Array | string;
  /** Its private key. */
  key?: Buffer | Uint8Array | string;
  /** The name the server's certificate must have when it is not the address' host (e.g. 'localhost'); also sent as SNI. */
  serverName?: string;
}

export interface ClientOptions {
  /**
   * A redq token, sent as `authorization: Bearer <token>` on every call and
   * stream (over TLS or not). Kept out of the Client's properties and of error messages.
   */
  token?: string;
  /**
   * true: TLS with Node's default roots; an object: a CA, a client
   * certificate (mTLS) and the expected server name. Default: plaintext, or
   * TLS for an `https://` address.
   */
  tls?: boolean | TlsOptions;
  /** grpc-js credentials instead of `tls` (not both). Default: plaintext. */
  credentials?: ChannelCredentials;
  /** grpc-js channel options, over DEFAULT_CHANNEL_OPTIONS. */
  channelOptions?: ChannelOptions;
  /** Deadline of each unary call, ms (default 10000). */
  callTimeout?: number;
  /** Retries of schedule() on UNAVAILABLE (default 5). */
  maxRetries?: number;
}

export interface ScheduleOptions {
  /** Deliver after this many ms (give this or deliverAt). */
  delay?: number;
  /** Deliver at this time. */
  deliverAt?: Date | number;
  attributes?: Record<string, string>;
  orderingKey?: string;
  /** Default: an automatic one, so that retries cannot schedule twice. */
  dedupeId?: string;
}

export interface ScheduleResult {
  id: string;
  deliverAt: Date;
  duplicate: boolean;
}

/** Protobuf Duration / Timestamp as proto-loader gives them (and as responses hold them). */
export interface ProtoTime {
  seconds: number;
  nanos: number;
}

/** A Duration in an admin request: milliseconds, or {seconds, nanos}. */
export type DurationInput = number | ProtoTime;

/** A Timestamp in an admin request: a Date, milliseconds since 1970, or {seconds, nanos}. */
export type TimestampInput = Date | number | ProtoTime;

/**
 * AdminService with a promise per RPC. Requests and responses are the
 * messages of proto/redq/v1/admin.proto in camelCase (64-bit numbers as
 * numbers, enums as their names). In requests, Durations are ms
 * (DurationInput) and Timestamps Dates or ms since 1970 (TimestampInput),
 * or either as {seconds, nanos}; responses hold both as {seconds, nanos}
 * (ProtoTime). A request field the message does not have rejects with a
 * TypeError. `timeout` overrides the client's callTimeout (ms).
 */
export declare class AdminClient {
  createTopic(request: { name: string; settings?: TopicSettingsInput }, timeout?: number): Promise<Topic>;
  getTopic(request: { name: string }, timeout?: number): Promise<Topic>;
  listTopics(request?: { pageSize?: number; pageToken?: string }, timeout?: number): Promise<{ topics: Topic[]; nextPageToken: string }>;
  updateTopic(request: { name: string; settings?: TopicSettingsInput }, timeout?: number): Promise<Topic>;
  deleteTopic(request: { name: string }, timeout?: number): Promise<{}>;
  createSubscription(request: { topic: string; name: string; settings?: SubscriptionSettingsInput }, timeout?: number): Promise<SubscriptionInfo>;
  getSubscription(request: { topic: string; name: string }, timeout?: number): Promise<SubscriptionInfo>;
  listSubscriptions(request: { topic: string }, timeout?: number): Promise<{ subscriptions: SubscriptionInfo[] }>;
  updateSubscription(request: { topic: string; name: string; settings?: SubscriptionSettingsInput }, timeout?: number): Promise<SubscriptionInfo>;
  deleteSubscription(request: { topic: string; name: string }, timeout?: number): Promise<{}>;
  listDeadLetters(
    request: { topic: string; subscription: string; pageSize?: number; pageToken?: string },
    timeout?: number,
  ): Promise<{ deadLetters: DeadLetter[]; nextPageToken: string }>;
  redriveDeadLetters(
    request: { topic: string; subscription: string; deadLetterIds?: string[]; maxPerSecond?: number },
    timeout?: number,
  ): Promise<{ redriven: number }>;
  purgeDeadLetters(request: { topic: string; subscription: string; deadLetterIds?: string[] }, timeout?: number): Promise<{ purged: number }>;
  seek(request: { topic: string; subscription: string; time?: TimestampInput; messageId?: string }, timeout?: number): Promise<{}>;
  /** Creates a recurring schedule, or replaces the one of its topic and name (docs/schedules.md). */
  putSchedule(request: { schedule: ScheduleInput }, timeout?: number): Promise<Schedule>;
  getSchedule(request: { topic: string; name: string }, timeout?: number): Promise<Schedule>;
  listSchedules(
    request: { topic: string; pageSize?: number; pageToken?: string },
    timeout?: number,
  ): Promise<{ schedules: Schedule[]; nextPageToken: string }>;
  deleteSchedule(request: { topic: string; name: string }, timeout?: number): Promise<{}>;
}

/** What each run of a schedule publishes. */
export interface ScheduleMessageInput {
  payload: Buffer | Uint8Array;
  attributes?: Record<string, string>;
  orderingKey?: string;
}

/** A recurring schedule to put: exactly one of `cron` (in `timeZone`) and `every`. */
export interface ScheduleInput {
  topic: string;
  name: string;
  cron?: string;
  every?: DurationInput;
  timeZone?: string;
  message: ScheduleMessageInput;
  startTime?: TimestampInput;
  endTime?: TimestampInput;
  paused?: boolean;
  catchUp?: number;
}

/** A recurring schedule as the server reports it; nextRun is null while paused or finished. */
export interface Schedule {
  topic: string;
  name: string;
  cron: string;
  every: ProtoTime | null;
  timeZone: string;
  message: { payload: Buffer; attributes: Record<string, string>; orderingKey: string };
  startTime: ProtoTime | null;
  endTime: ProtoTime | null;
  paused: boolean;
  catchUp: number;
  nextRun: ProtoTime | null;
  lastRun: ProtoTime | null;
  runs: number;
}

/** What a topic keeps its messages in, set by createTopic only (README, "Topic kinds"). */
export type TopicKindName = 'TOPIC_KIND_UNSPECIFIED' | 'TOPIC_KIND_STREAM' | 'TOPIC_KIND_EPHEMERAL' | 'TOPIC_KIND_LIST';

/** TopicSettings as a response holds them. */
export interface TopicSettings {
  retentionMaxAge?: ProtoTime | null;
  retentionMaxLength?: number;
  hardMaxLength?: number;
  dedupeWindow?: ProtoTime | null;
  maxPayloadBytes?: number;
  /** TOPIC_KIND_STREAM for topics made before kinds existed, or by publishing. */
  kind?: TopicKindName;
  /** LIST topics: the Redis list ('' on other kinds). */
  listKey?: string;
}

/** TopicSettings in a request: durations in ms (or {seconds, nanos}). */
export interface TopicSettingsInput {
  retentionMaxAge?: DurationInput | null;
  retentionMaxLength?: number;
  hardMaxLength?: number;
  dedupeWindow?: DurationInput | null;
  maxPayloadBytes?: number;
  /** createTopic only (UNSPECIFIED: STREAM); updateTopic refuses a change. */
  kind?: TopicKindName;
  /** createTopic of a LIST topic: the Redis list it consumes and publishes to. */
  listKey?: string;
}

export interface Topic {
  name: string;
  settings: TopicSettings | null;
  /** ListTopics: the Redis node or shard holding this topic cannot be reached (only the name is known). */
  unavailable?: boolean;
  stats: {
    streamLength: number;
    scheduledCount: number;
    nextDue: ProtoTime | null;
    publishedCount: number;
    droppedCount: number;
  } | null;
  subscriptions: string[];
}

export type StartPositionName = 'START_POSITION_UNSPECIFIED' | 'START_POSITION_EARLIEST' | 'START_POSITION_LATEST';

/** SubscriptionSettings as a response holds them. */
export interface SubscriptionSettings {
  ackDeadline?: ProtoTime | null;
  retryPolicy?: { minimumBackoff?: ProtoTime | null; maximumBackoff?: ProtoTime | null } | null;
  maxDeliveryAttempts?: number;
  deadLettering?: boolean;
  start?: StartPositionName;
  messageOrdering?: boolean;
  maxBlocked?: number | string;
  maxDeliveriesPerSecond?: number;
  burst?: number;
  maxOutstanding?: number;
}

/** SubscriptionSettings in a request: durations in ms (or {seconds, nanos}). */
export interface SubscriptionSettingsInput {
  ackDeadline?: DurationInput | null;
  retryPolicy?: { minimumBackoff?: DurationInput | null; maximumBackoff?: DurationInput | null } | null;
  maxDeliveryAttempts?: number;
  deadLettering?: boolean;
  start?: StartPositionName;
  messageOrdering?: boolean;
  maxBlocked?: number | string;
  maxDeliveriesPerSecond?: number;
  burst?: number;
  maxOutstanding?: number;
}

export interface SubscriptionInfo {
  topic: string;
  name: string;
  settings: SubscriptionSettings | null;
  stats: {
    pending: number;
    lag: number;
    oldestUnackedAge: ProtoTime | null;
    consumers: { name: string; pending: number; idle: ProtoTime | null }[];
    deadLetters: number;
    ackedCount: number;
  } | null;
}

export interface DeadLetter {
  deadLetterId: string;
  message: {
    id: string;
    payload: Buffer;
    attributes: Record<string, string>;
    orderingKey: string;
    publishTime: ProtoTime | null;
    deliverAt: ProtoTime | null;
    topic: string;
  } | null;
  deliveryAttempts: number;
  reason: 'DEAD_LETTER_REASON_UNSPECIFIED' | 'DEAD_LETTER_REASON_NACKED' | 'DEAD_LETTER_REASON_DEADLINE_EXCEEDED';
  deadLetteredAt: ProtoTime | null;
}

/** One channel to a redq server, shared by the publishers, subscribers and admin client made on it. */
export declare class Client {
  /** `address`: host:port, https://host:port (TLS) or http://host:port (plaintext). */
  constructor(address: string, options?: ClientOptions);
  /** host:port (without a scheme). */
  readonly address: string;
  /** Whether the channel uses TLS. */
  readonly tls: boolean;
  /** The AdminService. */
  readonly admin: AdminClient;
  /** The raw QueueService stub (grpc-js + proto-loader), for calls the library does not wrap. */
  readonly queueStub: GrpcClient & Record<string, any>;
  /** The raw AdminService stub, on the same channel. */
  readonly adminStub: GrpcClient & Record<string, any>;
  /** Waits until the channel is connected (default: callTimeout ms). */
  waitForReady(timeout?: number): Promise<void>;
  /**
   * One message delivered later; exactly one of delay / deliverAt. Retried on UNAVAILABLE.
   * Bad arguments (a payload that is not bytes, an unknown option) reject with a TypeError.
   */
  schedule(topic: string, payload: Payload, options: ScheduleOptions): Promise<ScheduleResult>;
  /** Removes a scheduled message not yet due; false if delivered, cancelled or unknown. */
  cancel(topic: string, messageId: string): Promise<boolean>;
  /** Moves a scheduled message not yet due. */
  reschedule(
    topic: string,
    messageId: string,
    when: { delay?: number; deliverAt?: Date | number },
  ): Promise<{ rescheduled: boolean; deliverAt: Date | null }>;
  /** Closes the channel. */
  close(): void;
}

/** Opens a Client (it connects on first use). */
export declare function connect(address: string, options?: ClientOptions): Client;

export interface PublishOptions {
  attributes?: Record<string, string>;
  orderingKey?: string;
  /** The message's own idempotency key; none by default (the publisher dedupes whole requests, unless autoDedupe: false). */
  dedupeId?: string;
  /** Deliver after this many ms... */
  delay?: number;
  /** ...or at this time (at most one of the two). */
  deliverAt?: Date | number;
}

export interface PublisherOptions {
  /** Unanswered requests on the stream (default 8). */
  maxInFlight?: number;
  /** Messages per request (default 1000, the server's limit). */
  maxBatchMessages?: number;
  /** Bytes per request, about (default 3 MiB). */
  maxBatchBytes?: number;
  /** ms a batch may wait to fill up (default 0: sent as soon as a request slot is free). */
  linger?: number;
  /** Give each request an automatic dedupe id, so a resend cannot publish twice (default true). */
  autoDedupe?: boolean;
  /** Resends of a request on UNAVAILABLE or a broken stream (default 10). */
  maxRetries?: number;
  /** Backoff, ms: initialBackoff (default 100) doubling up to maxBackoff (default 5000), jittered. */
  initialBackoff?: number;
  maxBackoff?: number;
  /**
   * ms after which a publish() the server has not answered rejects with DEADLINE_EXCEEDED
   * (default 60000, as Pub/Sub's publish timeout); also the default timeout of close().
   */
  timeout?: number;
  /** Told of each broken stream (the publisher reopens it). */
  onError?: (err: RedqError) => void;
  /** For the Client opened when the publisher is given an address. */
  clientOptions?: ClientOptions;
  /** With an address: the token of the Client opened (refused with a Client: set it on the Client). */
  token?: string;
  /** With an address: the TLS of the Client opened (refused with a Client: set it on the Client). */
  tls?: boolean | TlsOptions;
}

export interface PublisherStats {
  /** publish() calls taken (past the argument checks). */
  submitted: number;
  /** Of those, resolved with the id the server gave. */
  published: number;
  /** Of those, recognised by the server as duplicates (their id is the first one's). */
  duplicates: number;
  /** Rejected: refused by the server, out of retries, or past the timeout. */
  failed: number;
  /** Requests sent (resends included). */
  requests: number;
  /** Requests resent. */
  retries: number;
  /** Streams opened. */
  streams: number;
}

/** publish() with automatic batching over one PublishStream. */
export declare class Publisher {
  constructor(client: Client | string, options?: PublisherOptions);
  readonly client: Client;
  readonly stats: PublisherStats;
  /** The publish timeout, ms. */
  readonly timeout: number;
  /**
   * Resolves with the message id; rejects with a RedqError (DEADLINE_EXCEEDED after `timeout` ms
   * without an answer), or a TypeError for bad arguments.
   */
  publish(topic: string, payload: Payload, options?: PublishOptions): Promise<string>;
  /** Resolves once every message published so far has its id or its error. */
  flush(): Promise<void>;
  /**
   * Flushes, then ends the stream (and closes the Client if the publisher opened it). Waits at most
   * `timeout` ms (default: the publisher's timeout): then what still waits rejects with DEADLINE_EXCEEDED,
   * the stream is cancelled, and close() resolves.
   */
  close(options?: { timeout?: number }): Promise<void>;
}

/** One delivery, as the handler gets it. */
export declare class Message {
  readonly id: string;
  /** The topic it was published to (on a pattern subscription, the topic that matched). */
  readonly topic: string;
  /** A view of the received bytes. */
  readonly payload: Buffer;
  readonly attributes: Record<string, string>;
  readonly orderingKey: string;
  readonly publishTime: Date;
  /** When it was due: its scheduled time, or its publish time. */
  readonly deliverAt: Date;
  /** 1 on the first delivery, one more on each redelivery. */
  readonly deliveryAttempt: number;
  /** '' on EPHEMERAL topics: their messages are not acked (ack() and nack() send nothing). */
  readonly ackId: string;
  /** True once acked or nacked. */
  readonly settled: boolean;
  /** Acks it (later calls, and the handler's result, do nothing; nothing is sent on EPHEMERAL topics). */
  ack(): void;
  /** Gives it back for redelivery after `delay` ms, or the subscription's retry backoff when undefined (EPHEMERAL: nothing sent). */
  nack(delay?: number): void;
  toJSON(): object;
}

/** Returning (or fulfilling) acks the message, throwing (or rejecting) nacks it, unless it was settled already. */
export type Handler = (message: Message) => unknown;

export interface SubscribeOptions {
  /** Delivered-but-unacked messages the server lets the stream hold (default 100). */
  maxOutstanding?: number;
  /** Bytes the server may hold for the stream (default: the server's, 10 MiB). */
  maxOutstandingBytes?: number;
  /** Handlers running at once (default maxOutstanding). */
  concurrency?: number;
  /** Lease of each delivery, ms (default 30000); extended while the handler runs. */
  ackDeadline?: number;
  /** How long a delivery's lease is extended in all, ms (default 3600000). */
  maxExtension?: number;
  /** Redelivery delay after a handler fails, ms (default: the subscription's retry backoff). */
  nackDelay?: number;
  /**
   * ms an ack or nack may wait to share a request with later ones while the stream holds
   * less than half of maxOutstanding (default 10; 0: sent at the end of the event loop's phase).
   */
  ackLinger?: number;
  /** Where a new subscription starts (default 'earliest'). */
  start?: 'earliest' | 'latest';
  /** Retry backoff of a new subscription, ms. */
  retryPolicy?: { minimumBackoff?: number; maximumBackoff?: number };
  /** Deliveries before dead-lettering, for a new subscription. */
  maxDeliveryAttempts?: number;
  /**
   * Create the subscription ordered per ordering key (an existing one must be):
   * the messages of one key reach the handlers one at a time, in publish order.
   */
  messageOrdering?: boolean;
  /** Prefix of the stream's consumer name. */
  consumer?: string;
  /** Reconnect backoff, ms: initialBackoff (default 100) doubling up to maxBackoff (default 5000). */
  initialBackoff?: number;
  maxBackoff?: number;
  /** How long close() waits for the server to end the stream, ms (default 10000). */
  closeTimeout?: number;
  /**
   * Ask the server to confirm every request of acks, so that the stats count every ack applied
   * (default false: only where it costs little: the acks that linger, extensions, flush(), close(), and
   * every request on an ordered subscription).
   */
  confirmAcks?: boolean;
  /**
   * Told of handler failures (with the message) and of broken streams the subscription reopens;
   * not of a failure that stops it (a refused stream): that rejects `closed` (and `opened`).
   */
  onError?: (err: unknown, message?: Message) => void;
  /**
   * Instead of a topic (null or ''): a NATS-style pattern of EPHEMERAL topics ('sensors.*.temp',
   * 'sensors.>'); the stream gets the messages of every one whose name matches, created later or not.
   * A topic and a pattern, or neither, is a TypeError.
   */
  pattern?: string;
}

export interface AckConfirmation {
  ackedIds: string[];
  nackedIds: string[];
  modifiedIds: string[];
  lostIds: string[];
  invalidIds: string[];
}

export interface SubscriptionStats {
  /** Messages received, in `responses` responses. */
  received: number;
  responses: number;
  /** Acks and nacks made here (by handlers, message.ack()/nack()), and lease extensions sent (by the lease timer). */
  ackRequested: number;
  nackRequested: number;
  extendRequested: number;
  /** Of those, the ones the server reported it applied (all of them with confirmAcks)... */
  acked: number;
  nacked: number;
  extended: number;
  /** ...or did not: the delivery was no longer current (say redelivered since). */
  lost: number;
  /** Requests written on the stream, and streams opened. */
  requests: number;
  streams: number;
  /** EPHEMERAL topics: messages the server dropped for this stream because it fell behind. */
  dropped: number;
}

/** A handler running on the messages of one subscription, over a StreamingSubscribe stream. */
export declare class Subscription {
  /** '' on a pattern subscription. */
  readonly topic: string;
  /** '' on a topic's subscription. */
  readonly pattern: string;
  readonly subscription: string;
  readonly stats: SubscriptionStats;
  /** EPHEMERAL topics: the messages the server dropped for this stream, in all, because it fell behind (stats.dropped). */
  readonly dropped: number;
  /**
   * Resolves when the server has accepted the stream (the subscription exists then); rejects with the
   * RedqError if it stops before that (refused: INVALID_ARGUMENT, PERMISSION_DENIED…; or closed
   * first: CANCELLED). Waits while the server cannot be reached.
   */
  readonly opened: Promise<void>;
  /** Resolves once closed; rejects if the subscription stopped on an error (e.g. the server refused the stream). */
  readonly closed: Promise<void>;
  /** Changes the stream's flow control (0 or undefined: unchanged). */
  setFlowControl(limits: { maxOutstanding?: number; maxOutstandingBytes?: number }): void;
  /**
   * Sends the acks and nacks gathered so far, and resolves once the server has applied every ack, nack
   * and lease extension made before the call (those already written included), with what it said of those
   * it had not confirmed before the call (acks sent at full speed without confirmAcks are applied but not
   * listed). Rejects if the stream carrying them breaks first.
   */
  flush(): Promise<AckConfirmation>;
  /** Stops taking messages, waits for running handlers, sends their acks, ends the stream. */
  close(): Promise<void>;
}

export declare class Subscriber {
  /** With an address: `clientOptions`, `token` and `tls` are those of the Client opened (token and tls are refused with a Client). */
  constructor(client: Client | string, options?: SubscribeOptions & { clientOptions?: ClientOptions; token?: string; tls?: boolean | TlsOptions });
  readonly client: Client;
  /**
   * Starts handling the messages of `subscription` on `topic` (both created on first use); with
   * `options.pattern` and a null topic, of every EPHEMERAL topic the pattern matches.
   */
  subscribe(topic: string | null, subscription: string, handler: Handler, options?: SubscribeOptions): Subscription;
  /** Closes every subscription, then the Client if the subscriber opened it. */
  close(): Promise<void>;
}
