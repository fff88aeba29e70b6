//! The Lua scripts, loaded once. Each file in `lua/` documents its KEYS, ARGV
//! and reply; scripts are used only where several steps must be atomic.
//! `lua/lib.lua` holds the helpers several scripts share and is prepended to
//! the scripts that use it.

use redis::Script;
use std::sync::LazyLock;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
    ($name:ident, $file:literal, with_lib) => {
        pub static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/lib.lua"),
                include_str!(concat!("lua/", $file))
            ))
        });
    };
}

script!(ACK, "ack.lua", with_lib);
script!(APPEND_MESSAGES, "append_messages.lua");
script!(ENSURE_SUBSCRIPTION, "ensure_subscription.lua");
script!(FETCH_DELIVERIES, "fetch_deliveries.lua", with_lib);
script!(END_LEASES, "end_leases.lua", with_lib);
script!(EXTEND_LEASES, "extend_leases.lua", with_lib);
script!(RELEASE_CONSUMER, "release_consumer.lua");
script!(PRUNE_CONSUMERS, "prune_consumers.lua");
script!(PUBLISH_MESSAGES, "publish_messages.lua", with_lib);
script!(PROMOTE_DUE, "promote_due.lua", with_lib);
script!(CANCEL_SCHEDULED, "cancel_scheduled.lua");
script!(RESCHEDULE, "reschedule.lua", with_lib);
script!(REDRIVE_DEAD_LETTERS, "redrive_dead_letters.lua");
script!(SEEK, "seek.lua");
script!(TRIM_STREAM, "trim_stream.lua", with_lib);
