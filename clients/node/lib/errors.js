// RedqError: the error every call of the library rejects with, carrying the
// gRPC status code (numeric, and its name) of the failure.

import grpc from '@grpc/grpc-js';

const CODE_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));

export class RedqError extends Error {
  /**
   * @param {number} code gRPC status code (grpc.status)
   * @param {string} details the server's message
   * @param {object} [extra] {cause, metadata}
   */
  constructor(code, details, extra = {}) {
    const codeName = CODE_NAMES[code] ?? `CODE_${code}`;
    super(`${codeName}: ${details}`, extra.cause ? { cause: extra.cause } : undefined);
    this.name = 'RedqError';
    /** Numeric gRPC status code, e.g. 3 for INVALID_ARGUMENT. */
    this.code = code;
    /** Its name, e.g. 'INVALID_ARGUMENT'. */
    this.codeName = codeName;
    /** The status message alone, e.g. 'topic: must match …'. */
    this.details = details;
    /** Trailing metadata of the call, when the error came from one. */
    this.metadata = extra.metadata;
  }

  /** Wraps a grpc-js ServiceError (or returns a RedqError as it is). */
  static from(err) {
    if (err instanceof RedqError) return err;
    if (err && typeof err.code === 'number') {
      return new RedqError(err.code, err.details ?? err.message, { cause: err, metadata: err.metadata });
    }
    return new RedqError(grpc.status.UNKNOWN, err?.message ?? String(err), { cause: err });
  }
}

/**
 * Whether the server refused the caller: UNAUTHENTICATED (no token, or one
 * it does not know, or was revoked) or PERMISSION_DENIED (no grant for the
 * action). Never retried: the same credentials would be refused again.
 */
export function isAuthError(code) {
  return code === grpc.status.UNAUTHENTICATED || code === grpc.status.PERMISSION_DENIED;
}

/** Status codes a client may retry after a backoff. */
export function isRetryable(code) {
  return code === grpc.status.UNAVAILABLE;
}

/**
 * Whether a stream that ended with this code may be reopened: the codes of
 * broken connections, server shutdowns and server faults, and OK (the server
 * ended the stream with requests unanswered). The others say the request is
 * wrong (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED…) or the caller refused
 * (UNAUTHENTICATED, PERMISSION_DENIED: see isAuthError) and would fail again.
 */
export function isStreamRetryable(code) {
  if (isAuthError(code)) return false;
  switch (code) {
    case grpc.status.OK:
    case grpc.status.CANCELLED:
    case grpc.status.UNKNOWN:
    case grpc.status.DEADLINE_EXCEEDED:
    case grpc.status.RESOURCE_EXHAUSTED:
    case grpc.status.ABORTED:
    case grpc.status.INTERNAL:
    case grpc.status.UNAVAILABLE:
      return true;
    default:
      return false;
  }
}
