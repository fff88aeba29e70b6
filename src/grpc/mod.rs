//! gRPC services: request validation and proto <-> domain conversions.
//! Everything here speaks in `model` types; nothing imports `store`.

mod ack_stream;
pub mod admin;
mod authorized;
pub mod codec;
pub mod content_type;
pub mod convert;
mod publish_stream;
pub mod pubsub;
mod queue;
mod streaming_subscribe;
pub mod targets;

pub use admin::AdminApi;
pub use pubsub::PubSubApi;
pub use queue::QueueApi;
