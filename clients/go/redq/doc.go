// Package redq is a client library for redq, the gRPC message queue that
// keeps its messages in Redis.
//
// A Client is a connection: Dial (plaintext), or DialSecure with a Security
// for TLS, mTLS and a bearer token sent on every call and stream. On it:
//
//   - a Publisher publishes over one PublishStream: Publish returns a
//     PublishResult at once, whose Get gives the message id. Messages that
//     accumulate while requests are in flight go out together, and a broken
//     stream or an UNAVAILABLE answer is retried without duplicates (every
//     message carries a dedupe id). A message unanswered Timeout (60 s)
//     after Publish fails with DEADLINE_EXCEEDED; Close is bounded.
//   - a Subscriber (Subscribe) runs a Handler on a subscription's messages
//     over one StreamingSubscribe stream: returning nil acks, an error nacks.
//     Acks, nacks and lease extensions are batched on the stream; Close is
//     graceful. Ready tells when the stream is open (or refused); Flush and
//     Message.AckWithResult wait for the server's confirmation of acks.
//   - Schedule, Cancel and Reschedule are the scheduling calls, and Admin
//     is the generated AdminService client.
//
// Errors from the server are gRPC status errors: use status.Code(err).
// UNAUTHENTICATED and PERMISSION_DENIED are never retried: a Publisher fails
// the messages they concern, a Subscriber stops with them.
// The generated stubs are the package
// github.com/redq-dev/redq/clients/go/redq/v1 (redqv1).
package redq
