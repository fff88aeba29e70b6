//! The Lua scripts, loaded once. Each file in `lua/` documents its KEYS, ARGV
//! and reply; scripts are used only where several steps must be atomic.

use redis::Script;
use std::sync::LazyLock;

pub static FETCH_DELIVERIES: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/fetch_deliveries.lua")));

pub static EXTEND_LEASES: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/extend_leases.lua")));

pub static RELEASE_CONSUMER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/release_consumer.lua")));

pub static PRUNE_CONSUMERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/prune_consumers.lua")));
