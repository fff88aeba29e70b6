//! The Lua scripts, loaded once. Each file in `lua/` documents its KEYS, ARGV
//! and reply; scripts are used only where several steps must be atomic.
//! `lua/lib.lua` holds the helpers several scripts share and is prepended to
//! the scripts that use it.

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs};
use std::sync::LazyLock;

/// A Lua script, sent as `EVALSHA`, and as `EVAL` with its source when the
/// node does not know it (`NOSCRIPT`: a restarted Redis, or a replica just
/// promoted by a failover, has an empty script cache). Both go to the node
/// of the script's keys: redis-rs' own fallback loads the script on every
/// node of a cluster first, which fails while one of them is down.
pub struct Script {
    code: &'static str,
    hash: String,
}

impl Script {
    fn new(code: &'static str) -> Self {
        Self {
            hash: redis::Script::new(code).get_hash().to_owned(),
            code,
        }
    }

    pub fn key<T: ToRedisArgs>(&self, key: T) -> Invocation<'_> {
        let mut invocation = Invocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        };
        invocation.key(key);
        invocation
    }
}

/// A script call being prepared: its keys, then its arguments.
pub struct Invocation<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn command(&self, verb: &str, body: &[u8]) -> Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(body)
            .arg(self.keys.len())
            .arg(&self.keys[..])
            .arg(&self.args[..]);
        cmd
    }

    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self
            .command("EVALSHA", self.script.hash.as_bytes())
            .query_async(conn)
            .await
        {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.command("EVAL", self.script.code.as_bytes())
                    .query_async(conn)
                    .await
            }
            other => other,
        }
    }
}

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
script!(RETURN_UNSENT, "return_unsent.lua", with_lib);
script!(PRUNE_CONSUMERS, "prune_consumers.lua");
script!(PUBLISH_MESSAGES, "publish_messages.lua", with_lib);
script!(PROMOTE_DUE, "promote_due.lua", with_lib);
script!(CANCEL_SCHEDULED, "cancel_scheduled.lua");
script!(RESCHEDULE, "reschedule.lua", with_lib);
script!(REDRIVE_DEAD_LETTERS, "redrive_dead_letters.lua");
script!(SEEK, "seek.lua", with_lib);
script!(TRIM_STREAM, "trim_stream.lua", with_lib);
