//! Topic kinds (STREAM, EPHEMERAL, LIST): which kind a topic is, read from
//! Redis with its settings and kept a few seconds; the kinds this replica has
//! seen, so that a topic whose kind Redis lost (a restart without
//! persistence, a failover that lost writes) is registered again as what it
//! was instead of silently becoming a STREAM topic; and the refusals of calls
//! that make no sense for a kind.

use super::{Broker, TOPIC_SETTINGS_TTL};
use crate::error::{Error, Result};
use crate::model::{TopicKind, TopicSettings};
use crate::store::TopicKeys;
use std::time::Instant;

/// A topic's settings and kind, with when they were read.
pub(super) type ReadConfig = (Instant, TopicSettings, TopicKind);

impl Broker {
    /// The topic's settings and kind, as read at most [`TOPIC_SETTINGS_TTL`]
    /// ago. A topic without a stored kind is a STREAM topic, unless this
    /// replica saw it as another kind: then Redis lost it, and it is stored
    /// again.
    pub(super) async fn topic_config(&self, topic: &str) -> Result<(TopicSettings, TopicKind)> {
        if let Some((read, settings, kind)) = self
            .topic_settings
            .lock()
            .expect("settings lock")
            .get(topic)
            && read.elapsed() < TOPIC_SETTINGS_TTL
        {
            return Ok((*settings, kind.clone()));
        }
        let keys = TopicKeys::new(topic);
        let (settings, stored) = self.store.topic_config(&keys).await?;
        let kind = match stored {
            Some(kind) => kind,
            None => match self.remembered_kind(topic) {
                Some(kind) => {
                    tracing::warn!(
                        topic,
                        kind = kind.name(),
                        "redis lost the topic's kind; storing it again"
                    );
                    self.store.register_topic(topic).await?;
                    self.store.set_topic_kind(&keys, &kind).await?;
                    kind
                }
                None => TopicKind::Stream,
            },
        };
        self.remember_kind(topic, &kind);
        self.topic_settings
            .lock()
            .expect("settings lock")
            .insert(topic.to_owned(), (Instant::now(), settings, kind.clone()));
        Ok((settings, kind))
    }

    /// The topic's kind (see [`Self::topic_config`]).
    pub async fn topic_kind(&self, topic: &str) -> Result<TopicKind> {
        Ok(self.topic_config(topic).await?.1)
    }

    /// Notes a kind other than STREAM that this replica saw `topic` have.
    pub(super) fn remember_kind(&self, topic: &str, kind: &TopicKind) {
        if *kind != TopicKind::Stream {
            self.known_kinds
                .lock()
                .expect("kinds lock")
                .insert(topic.to_owned(), kind.clone());
        }
    }

    fn remembered_kind(&self, topic: &str) -> Option<TopicKind> {
        self.known_kinds
            .lock()
            .expect("kinds lock")
            .get(topic)
            .cloned()
    }

    pub(super) fn forget_topic_settings(&self, topic: &str) {
        self.topic_settings
            .lock()
            .expect("settings lock")
            .remove(topic);
    }

    /// Deleting a topic: its kind is no longer remembered.
    pub(super) fn forget_topic(&self, topic: &str) {
        self.forget_topic_settings(topic);
        self.known_kinds.lock().expect("kinds lock").remove(topic);
        self.known_topics.lock().expect("topics lock").remove(topic);
    }

    /// The topic's kind, when `call` applies to it; FAILED_PRECONDITION
    /// naming the kind when it does not.
    pub(super) async fn kind_for(&self, topic: &str, call: Call) -> Result<TopicKind> {
        let kind = self.topic_kind(topic).await?;
        let applies = match (&kind, call) {
            (TopicKind::Stream, _) => true,
            (TopicKind::Ephemeral, Call::Subscribe) => true,
            (TopicKind::Ephemeral, _) => false,
            (TopicKind::List { .. }, Call::Seek) => false,
            (TopicKind::List { .. }, _) => true,
        };
        if applies {
            Ok(kind)
        } else {
            Err(not_for_kind(call.field(), call.name(), &kind))
        }
    }
}

/// The calls that some kinds refuse (see [`Broker::kind_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Subscribe,
    Ack,
    Nack,
    ModifyAckDeadline,
    Seek,
    DeadLetters,
    /// Creating, changing or deleting a subscription.
    Subscriptions,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Subscribe => "Subscribe",
            Call::Ack => "Ack",
            Call::Nack => "Nack",
            Call::ModifyAckDeadline => "ModifyAckDeadline",
            Call::Seek => "Seek",
            Call::DeadLetters => "Dead letters",
            Call::Subscriptions => "A subscription of its own",
        }
    }

    /// The request field the refusal names.
    fn field(self) -> &'static str {
        match self {
            Call::Ack | Call::Nack | Call::ModifyAckDeadline => "ack_ids",
            Call::Subscribe | Call::Seek | Call::DeadLetters | Call::Subscriptions => "topic",
        }
    }
}

/// FAILED_PRECONDITION on `field`: `what` does not apply to `kind`.
pub fn not_for_kind(field: &str, what: &str, kind: &TopicKind) -> Error {
    Error::FailedPrecondition {
        field: field.into(),
        reason: format!("{what} does not apply to {} topics", kind.name()),
    }
}

/// The settings that apply to STREAM topics only (retention and dedupe) are
/// refused on the other kinds, naming the field.
pub fn check_settings_for_kind(settings: &TopicSettings, kind: &TopicKind) -> Result<()> {
    if *kind == TopicKind::Stream {
        return Ok(());
    }
    let TopicSettings {
        retention_max_age,
        retention_max_length,
        hard_max_length,
        dedupe_window,
        max_payload_bytes: _, // every kind
    } = settings;
    for (field, given) in [
        ("settings.retention_max_age", retention_max_age.is_some()),
        (
            "settings.retention_max_length",
            retention_max_length.is_some(),
        ),
        ("settings.hard_max_length", hard_max_length.is_some()),
        ("settings.dedupe_window", dedupe_window.is_some()),
    ] {
        if given {
            return Err(Error::invalid(
                field,
                format!("does not apply to {} topics", kind.name()),
            ));
        }
    }
    Ok(())
}
