//! gRPC services: request validation and proto <-> domain conversions.
//! No Redis types appear here.

mod admin;
pub mod codec;
pub mod convert;
mod queue;

pub use admin::AdminApi;
pub use queue::QueueApi;
