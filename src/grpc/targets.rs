//! What each request acts on, for its authorization: one place that maps
//! every request type to its topic (and subscription).

use crate::auth::Resource;
use crate::pb;

pub trait Target {
    fn target(&self) -> Resource<'_>;
}

macro_rules! targets {
    ($($request:ty => |$r:ident| $resource:expr;)+) => {
        $(impl Target for $request {
            fn target(&self) -> Resource<'_> {
                let $r = self;
                $resource
            }
        })+
    };
}

targets! {
    pb::PublishRequest => |r| Resource::topic(&r.topic);
    pb::ScheduleDelayedRequest => |r| Resource::topic(&r.topic);
    pb::CancelScheduledRequest => |r| Resource::topic(&r.topic);
    pb::RescheduleDelayedRequest => |r| Resource::topic(&r.topic);
    pb::SubscribeRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::AckRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::NackRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::ModifyAckDeadlineRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::CreateTopicRequest => |r| Resource::topic(&r.name);
    pb::GetTopicRequest => |r| Resource::topic(&r.name);
    pb::UpdateTopicRequest => |r| Resource::topic(&r.name);
    pb::DeleteTopicRequest => |r| Resource::topic(&r.name);
    pb::CreateSubscriptionRequest => |r| Resource::subscription(&r.topic, &r.name);
    pb::GetSubscriptionRequest => |r| Resource::subscription(&r.topic, &r.name);
    pb::UpdateSubscriptionRequest => |r| Resource::subscription(&r.topic, &r.name);
    pb::DeleteSubscriptionRequest => |r| Resource::subscription(&r.topic, &r.name);
    pb::ListDeadLettersRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::RedriveDeadLettersRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::PurgeDeadLettersRequest => |r| Resource::subscription(&r.topic, &r.subscription);
    pb::SeekRequest => |r| Resource::subscription(&r.topic, &r.subscription);
}
