//! gRPC services: request validation and proto <-> domain conversions.
//! No Redis types appear here.

pub mod convert;
mod queue;

pub use queue::QueueApi;
