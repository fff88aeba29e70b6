//! What a stream keeps of its authorization while it runs: the caller's
//! place under `--max-streams-per-token`, and an end with the status of the
//! reload that revoked its token or grant.

use super::targets::Target;
use crate::auth::{Action, Authorizer, Caller, Resource, StreamSlot};
use crate::broker::TopicFilter;
use crate::pb;
use futures::{Stream, StreamExt};
use std::pin::Pin;
use tokio::sync::oneshot;
use tonic::Status;

pub type Guarded<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// `responses` until they end, or until the tokens file no longer lets
/// `caller` subscribe to `subscription` of `topic`: then the stream ends
/// with UNAUTHENTICATED (token removed) or PERMISSION_DENIED (grant removed).
pub fn until_revoked<T: Send + 'static>(
    responses: impl Stream<Item = Result<T, Status>> + Send + 'static,
    authorizer: Authorizer,
    caller: Caller,
    (topic, subscription): (String, String),
    slot: StreamSlot,
) -> Guarded<T> {
    let (revoked, revocation) = oneshot::channel();
    let watch = async move {
        let status = authorizer
            .revoked(&caller, Action::Subscribe, &topic, &subscription)
            .await;
        let _ = revoked.send(status);
    };
    let ending = futures::stream::once(async move { revocation.await.ok().map(Err) })
        .filter_map(std::future::ready);
    Box::pin(responses.take_until(watch).chain(ending).map(move |item| {
        let _held = &slot;
        item
    }))
}

/// The names a Subscribe stream's grant is checked on while it runs: its
/// topic, or its pattern, and its subscription.
pub fn stream_names(request: &pb::SubscribeRequest) -> (String, String) {
    let target = request.target();
    (
        target.topic.to_owned(),
        target.subscription.unwrap_or_default().to_owned(),
    )
}

/// The topics a pattern stream of `caller` may receive: those it may
/// subscribe to under `subscription`, as its grants were when it opened.
pub fn topics_allowed(authorizer: &Authorizer, caller: &Caller, subscription: &str) -> TopicFilter {
    let (authorizer, caller, subscription) =
        (authorizer.clone(), caller.clone(), subscription.to_owned());
    TopicFilter::new(move |topic| {
        authorizer.may(
            &caller,
            Action::Subscribe,
            Resource::subscription(topic, &subscription),
        )
    })
}
