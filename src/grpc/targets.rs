//! What each request acts on: the one place that maps every request type to
//! its topic (and subscription), for its authorization, and that checks the
//! names it carries, both before any handler runs.

use super::convert::check_name;
use crate::auth::Resource;
use crate::error::Result;
use crate::pb;

pub trait Target {
    /// The topic (and subscription) the request acts on.
    fn target(&self) -> Resource<'_>;

    /// Its names, each with the field it came from.
    fn names(&self) -> Vec<(&'static str, &str)>;

    /// INVALID_ARGUMENT naming the first field whose name is not valid.
    fn check_names(&self) -> Result<()> {
        self.names()
            .into_iter()
            .try_for_each(|(field, name)| check_name(field, name))
    }
}

macro_rules! targets {
    ($($request:ty => $resource:ident($($field:ident),+);)+) => {
        $(impl Target for $request {
            fn target(&self) -> Resource<'_> {
                Resource::$resource($(&self.$field),+)
            }

            fn names(&self) -> Vec<(&'static str, &str)> {
                vec![$((stringify!($field), self.$field.as_str())),+]
            }
        })+
    };
}

targets! {
    pb::PublishRequest => topic(topic);
    pb::PublishStreamRequest => topic(topic);
    pb::ScheduleDelayedRequest => topic(topic);
    pb::CancelScheduledRequest => topic(topic);
    pb::RescheduleDelayedRequest => topic(topic);
    pb::AckRequest => subscription(topic, subscription);
    pb::NackRequest => subscription(topic, subscription);
    pb::ModifyAckDeadlineRequest => subscription(topic, subscription);
    pb::CreateTopicRequest => topic(name);
    pb::GetTopicRequest => topic(name);
    pb::UpdateTopicRequest => topic(name);
    pb::DeleteTopicRequest => topic(name);
    pb::CreateSubscriptionRequest => subscription(topic, name);
    pb::GetSubscriptionRequest => subscription(topic, name);
    pb::ListSubscriptionsRequest => topic(topic);
    pb::UpdateSubscriptionRequest => subscription(topic, name);
    pb::DeleteSubscriptionRequest => subscription(topic, name);
    pb::ListDeadLettersRequest => subscription(topic, subscription);
    pb::RedriveDeadLettersRequest => subscription(topic, subscription);
    pb::PurgeDeadLettersRequest => subscription(topic, subscription);
    pb::SeekRequest => subscription(topic, subscription);
    pb::ListSchedulesRequest => topic(topic);
}

/// A schedule's request names its topic and the schedule, whose name
/// follows the rules of topic names.
macro_rules! schedule_targets {
    ($($request:ty),+) => {
        $(impl Target for $request {
            fn target(&self) -> Resource<'_> {
                Resource::topic(&self.topic)
            }

            fn names(&self) -> Vec<(&'static str, &str)> {
                vec![("topic", &self.topic), ("name", &self.name)]
            }
        })+
    };
}

schedule_targets!(pb::GetScheduleRequest, pb::DeleteScheduleRequest);

/// PutSchedule carries its names inside the schedule; a request without one
/// targets no topic and fails the name check.
impl Target for pb::PutScheduleRequest {
    fn target(&self) -> Resource<'_> {
        Resource::topic(self.schedule.as_ref().map_or("", |s| s.topic.as_str()))
    }

    fn names(&self) -> Vec<(&'static str, &str)> {
        let (topic, name) = self
            .schedule
            .as_ref()
            .map_or(("", ""), |s| (s.topic.as_str(), s.name.as_str()));
        vec![("schedule.topic", topic), ("schedule.name", name)]
    }
}

/// A Subscribe request names a topic, or a pattern of EPHEMERAL topics
/// instead (see `convert::subscribe_pattern`); a pattern stream's grants
/// are checked again for each topic it delivers from.
impl Target for pb::SubscribeRequest {
    fn target(&self) -> Resource<'_> {
        if self.topic.is_empty() && !self.pattern.is_empty() {
            Resource::subscription(&self.pattern, &self.subscription)
        } else {
            Resource::subscription(&self.topic, &self.subscription)
        }
    }

    fn names(&self) -> Vec<(&'static str, &str)> {
        if self.topic.is_empty() && !self.pattern.is_empty() {
            vec![("subscription", self.subscription.as_str())]
        } else {
            vec![
                ("topic", self.topic.as_str()),
                ("subscription", self.subscription.as_str()),
            ]
        }
    }
}
