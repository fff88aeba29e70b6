//! The Lua scripts, loaded once. Each file in `lua/` documents its KEYS, ARGV
//! and reply; scripts are used only where several steps must be atomic.
//! `lua/lib.lua` holds the helpers several scripts share; a script that uses
//! them starts with the ones it needs (see [`with_lib`]).

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs};
use std::sync::LazyLock;

/// A Lua script, sent as `EVALSHA`, and as `EVAL` with its source when the
/// node does not know it (`NOSCRIPT`: a restarted Redis, or a replica just
/// promoted by a failover, has an empty script cache). Both go to the node
/// of the script's keys: redis-rs' own fallback loads the script on every
/// node of a cluster first, which fails while one of them is down.
pub struct Script {
    code: String,
    hash: String,
}

impl Script {
    fn new(code: impl Into<String>) -> Self {
        let code = code.into();
        Self {
            hash: redis::Script::new(&code).get_hash().to_owned(),
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
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(with_lib(include_str!(concat!("lua/", $file)))));
    };
}

const LIB: &str = include_str!("lua/lib.lua");

/// `body` after the helpers of `lua/lib.lua` it uses, directly or through
/// another helper, in lib's order. Redis runs a script's whole source on each
/// call, and each helper is a closure it allocates then: on this project's
/// machines the full lib cost ~9 µs per call, more than most of the commands
/// a script makes.
fn with_lib(body: &str) -> String {
    let helpers = lib_helpers();
    let mut needed = vec![false; helpers.len()];
    let mut uses: Vec<&str> = words(body).collect();
    while let Some(word) = uses.pop() {
        if let Some(at) = helpers.iter().position(|(name, _)| *name == word)
            && !needed[at]
        {
            needed[at] = true;
            uses.extend(words(helpers[at].1));
        }
    }
    let mut code: String = helpers
        .iter()
        .zip(needed)
        .filter(|(_, needed)| *needed)
        .map(|((_, text), _)| *text)
        .collect();
    code.push_str(body);
    code
}

/// lib.lua's top-level definitions (`local NAME …` or `local function NAME`,
/// up to the next one), by name. Each starts with its own line, which is how
/// lib.lua is written.
fn lib_helpers() -> Vec<(&'static str, &'static str)> {
    let mut starts: Vec<usize> = LIB
        .match_indices("\nlocal ")
        .map(|(at, _)| at + 1)
        .collect();
    starts.push(LIB.len());
    starts
        .windows(2)
        .map(|span| {
            let text = &LIB[span[0]..span[1]];
            let rest = text["local ".len()..].trim_start_matches("function ");
            let name = words(rest).next().unwrap_or_default();
            (name, text)
        })
        .collect()
}

/// The identifiers of Lua source, comments left out.
fn words(code: &str) -> impl Iterator<Item = &str> {
    code.lines()
        .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
}

script!(ACK, "ack.lua", with_lib);
script!(APPEND_MESSAGES, "append_messages.lua", with_lib);
script!(ENSURE_SUBSCRIPTION, "ensure_subscription.lua");
script!(FETCH_DELIVERIES, "fetch_deliveries.lua", with_lib);
script!(END_LEASES, "end_leases.lua", with_lib);
script!(EXTEND_LEASES, "extend_leases.lua", with_lib);
script!(RELEASE_CONSUMER, "release_consumer.lua");
script!(RETURN_UNSENT, "return_unsent.lua", with_lib);
script!(PRUNE_CONSUMERS, "prune_consumers.lua");
script!(PUBLISH_MESSAGES, "publish_messages.lua", with_lib);
script!(PUSH_ELEMENTS, "push_elements.lua", with_lib);
script!(RETURN_HELD_ELEMENTS, "return_held_elements.lua", with_lib);
script!(PROMOTE_DUE, "promote_due.lua", with_lib);
script!(CANCEL_SCHEDULED, "cancel_scheduled.lua");
script!(RESCHEDULE, "reschedule.lua", with_lib);
script!(REDRIVE_DEAD_LETTERS, "redrive_dead_letters.lua", with_lib);
script!(WATCH_TOPIC, "watch_topic.lua", with_lib);
script!(SEEK, "seek.lua", with_lib);
script!(TRIM_STREAM, "trim_stream.lua", with_lib);
script!(READ_SCHEDULE, "read_schedule.lua", with_lib);
script!(PUT_SCHEDULE, "put_schedule.lua");
script!(RUN_SCHEDULE, "run_schedule.lua");
script!(DELETE_SCHEDULE, "delete_schedule.lua");
script!(DUE_SCHEDULES, "due_schedules.lua", with_lib);

#[cfg(test)]
mod tests {
    use super::*;

    fn defines(code: &str, helper: &str) -> bool {
        code.contains(&format!("local function {helper}("))
            || code.contains(&format!("local {helper} ="))
    }

    #[test]
    fn a_script_carries_the_helpers_it_calls_and_theirs_and_no_others() {
        let ack = &ACK.code;
        for helper in [
            "ordering",
            "release",
            "in_chunks",
            "UNPACK_CHUNK",
            "call_with",
        ] {
            assert!(defines(ack, helper), "ack.lua lacks {helper}");
        }
        for helper in ["take_keys", "end_lease", "dead_letter", "backoff"] {
            assert!(!defines(ack, helper), "ack.lua carries {helper}");
        }
        let fetch = &FETCH_DELIVERIES.code;
        for helper in [
            "end_lease",
            "dead_letter",
            "park",
            "retry_settings",
            "PARKED",
        ] {
            assert!(
                defines(fetch, helper),
                "fetch_deliveries.lua lacks {helper}"
            );
        }
    }

    #[test]
    fn helpers_keep_lib_order_so_each_is_defined_before_its_callers() {
        let fetch = &FETCH_DELIVERIES.code;
        let at = |helper: &str| fetch.find(&format!("local function {helper}(")).unwrap();
        assert!(at("park") < at("dead_letter"));
        assert!(at("dead_letter") < at("end_lease"));
    }

    #[test]
    fn comments_name_no_helper() {
        let code = with_lib("-- ordering and release are only mentioned here\nreturn 1\n");
        assert_eq!(
            code,
            "-- ordering and release are only mentioned here\nreturn 1\n"
        );
    }
}
