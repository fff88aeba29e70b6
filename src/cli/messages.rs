//! `redq publish`, `subscribe`, `schedule` and `cancel`: the QueueService from
//! a shell.

use super::format::{self, payload_inline};
use super::{connect, print, queue_client, status_error};
use crate::cli::ClientChannel;
use crate::config::{CancelArgs, MessageArgs, PublishArgs, ScheduleArgs, StartArg, SubscribeArgs};
use crate::error::BoxError;
use crate::pb;
use crate::pb::queue_service_client::QueueServiceClient;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use indicatif::ProgressBar;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

type Client = QueueServiceClient<ClientChannel>;

/// With `--lines`, a partial batch is sent once stdin has been quiet this long,
/// so `tail -f log | redq publish --lines` publishes as lines come.
const LINES_IDLE_FLUSH: Duration = Duration::from_millis(200);

/// `redq publish`: one message from the argument or stdin, one per stdin line,
/// or the messages of a JSON-lines file; prints their ids in order.
pub async fn publish(args: PublishArgs) -> Result<(), BoxError> {
    let PublishArgs {
        topic,
        payload,
        lines,
        file,
        batch,
        delay,
        message,
        server,
    } = args;
    let template = template(&message, delay)?;
    let batch = batch as usize;
    // A bad file fails before anything is sent.
    let from_file = match &file {
        Some(path) => Some(read_jsonl(path, &template)?),
        None => None,
    };
    let mut client = queue_client(connect(&server.server, &server.tls).await?);
    let mut publisher = Publisher {
        client: &mut client,
        topic: &topic,
        published: 0,
        progress: None,
    };
    if let Some(messages) = from_file {
        return publisher.publish_all(messages, batch).await;
    }
    if lines {
        return publisher.publish_lines(template, batch).await;
    }
    let payload = match payload {
        Some(text) => text.into_bytes(),
        None => read_stdin()?,
    };
    let message = pb::PublishMessage {
        payload: payload.into(),
        ..template
    };
    publisher.send(vec![message]).await
}

/// The fields every message of one `publish` or `schedule` shares.
fn template(args: &MessageArgs, delay: Option<Duration>) -> Result<pb::PublishMessage, BoxError> {
    Ok(pb::PublishMessage {
        payload: Default::default(),
        attributes: args.attributes.iter().cloned().collect(),
        ordering_key: args.ordering_key.clone().unwrap_or_default(),
        dedupe_id: args.dedupe_id.clone().unwrap_or_default(),
        deliver_at: None,
        delay: delay.map(|d| proto_duration("--delay", d)).transpose()?,
    })
}

fn proto_duration(what: &str, d: Duration) -> Result<prost_types::Duration, BoxError> {
    prost_types::Duration::try_from(d).map_err(|_| format!("{what}: too long").into())
}

/// All of stdin as one payload. A single trailing newline is dropped, so
/// `echo hello | redq publish t` publishes `hello`.
fn read_stdin() -> Result<Vec<u8>, BoxError> {
    let mut payload = Vec::new();
    std::io::stdin()
        .read_to_end(&mut payload)
        .map_err(|e| format!("stdin: {e}"))?;
    if payload.ends_with(b"\n") {
        payload.pop();
        if payload.ends_with(b"\r") {
            payload.pop();
        }
    }
    Ok(payload)
}

/// One line of a `--file`: a message in JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonMessage {
    payload: Option<String>,
    payload_base64: Option<String>,
    #[serde(default)]
    attributes: HashMap<String, String>,
    ordering_key: Option<String>,
    dedupe_id: Option<String>,
    /// A duration such as "10s" or "1h 30m".
    delay: Option<String>,
    /// An RFC 3339 time.
    deliver_at: Option<String>,
}

impl JsonMessage {
    /// The message this line describes; fields it leaves out come from `template`.
    fn into_message(self, template: &pb::PublishMessage) -> Result<pb::PublishMessage, String> {
        let JsonMessage {
            payload,
            payload_base64,
            attributes,
            ordering_key,
            dedupe_id,
            delay,
            deliver_at,
        } = self;
        let payload = match (payload, payload_base64) {
            (Some(text), None) => text.into_bytes(),
            (None, Some(encoded)) => BASE64
                .decode(encoded.as_bytes())
                .map_err(|e| format!("payload_base64: {e}"))?,
            _ => return Err("needs exactly one of payload and payload_base64".into()),
        };
        let mut all_attributes = template.attributes.clone();
        all_attributes.extend(attributes);
        let (deliver_at, delay) = match (deliver_at, delay) {
            (Some(_), Some(_)) => return Err("delay and deliver_at are exclusive".into()),
            (Some(at), None) => (
                Some(
                    at.parse()
                        .map_err(|_| format!("deliver_at: {at:?} is not an RFC 3339 time"))?,
                ),
                None,
            ),
            (None, Some(delay)) => {
                let d = humantime::parse_duration(&delay)
                    .map_err(|e| format!("delay: {delay:?}: {e}"))?;
                let d = prost_types::Duration::try_from(d)
                    .map_err(|_| format!("delay: {delay:?} is too long"))?;
                (None, Some(d))
            }
            (None, None) => (template.deliver_at, template.delay),
        };
        Ok(pb::PublishMessage {
            payload: payload.into(),
            attributes: all_attributes,
            ordering_key: ordering_key.unwrap_or_else(|| template.ordering_key.clone()),
            dedupe_id: dedupe_id.unwrap_or_else(|| template.dedupe_id.clone()),
            deliver_at,
            delay,
        })
    }
}

/// Every message of a JSON-lines file (blank lines skipped); the first bad
/// line fails the whole file, naming `path:line`.
fn read_jsonl(
    path: &Path,
    template: &pb::PublishMessage,
) -> Result<Vec<pb::PublishMessage>, BoxError> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut messages = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{shown}:{}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let message = serde_json::from_str::<JsonMessage>(&line)
            .map_err(|e| e.to_string())
            .and_then(|m| m.into_message(template))
            .map_err(|e| format!("{shown}:{}: {e}", i + 1))?;
        messages.push(message);
    }
    Ok(messages)
}

/// Sends batches of one `publish` and prints the ids as they come back.
struct Publisher<'a> {
    client: &'a mut Client,
    topic: &'a str,
    /// Messages published so far (for the error after a partial publish).
    published: usize,
    progress: Option<ProgressBar>,
}

impl Publisher<'_> {
    /// Publishes `messages` in batches of `batch`, with a progress bar on stderr
    /// (drawn only when stderr is a terminal).
    async fn publish_all(
        &mut self,
        messages: Vec<pb::PublishMessage>,
        batch: usize,
    ) -> Result<(), BoxError> {
        let bar = format::progress_bar(messages.len() as u64, "");
        self.progress = Some(bar.clone());
        let mut messages = messages.into_iter().peekable();
        while messages.peek().is_some() {
            let chunk: Vec<_> = messages.by_ref().take(batch).collect();
            if let Err(err) = self.send(chunk).await {
                bar.abandon();
                return Err(err);
            }
        }
        bar.finish_and_clear();
        Ok(())
    }

    /// Publishes one message per line of stdin, in batches of `batch` (or
    /// fewer when stdin goes quiet).
    async fn publish_lines(
        &mut self,
        template: pb::PublishMessage,
        batch: usize,
    ) -> Result<(), BoxError> {
        let mut lines = read_lines();
        let mut pending = Vec::new();
        loop {
            let next = if pending.is_empty() {
                lines.recv().await
            } else {
                match tokio::time::timeout(LINES_IDLE_FLUSH, lines.recv()).await {
                    Ok(next) => next,
                    Err(_quiet) => {
                        self.send(std::mem::take(&mut pending)).await?;
                        continue;
                    }
                }
            };
            match next {
                None => break,
                Some(Err(e)) => return Err(format!("stdin: {e}").into()),
                Some(Ok(line)) if line.is_empty() => {}
                Some(Ok(line)) => {
                    pending.push(pb::PublishMessage {
                        payload: line.into(),
                        ..template.clone()
                    });
                    if pending.len() >= batch {
                        self.send(std::mem::take(&mut pending)).await?;
                    }
                }
            }
        }
        if !pending.is_empty() {
            self.send(pending).await?;
        }
        Ok(())
    }

    /// One Publish call; prints an id per message (`<id> duplicate` for a
    /// duplicate's slot).
    async fn send(&mut self, messages: Vec<pb::PublishMessage>) -> Result<(), BoxError> {
        let count = messages.len();
        let response = self
            .client
            .publish(pb::PublishRequest {
                topic: self.topic.to_string(),
                messages,
                dedupe_id: String::new(),
            })
            .await
            .map_err(|status| {
                let err = status_error(status);
                match self.published {
                    0 => err,
                    n => format!("{err} (the {n} messages before were published)").into(),
                }
            })?
            .into_inner();
        let pb::PublishResponse {
            message_ids,
            duplicates,
            deliver_at: _,
        } = response;
        let mut text = String::new();
        for (i, id) in message_ids.iter().enumerate() {
            text.push_str(id);
            if duplicates.get(i).copied().unwrap_or(false) {
                text.push_str(" duplicate");
            }
            text.push('\n');
        }
        self.published += count;
        match &self.progress {
            Some(bar) => {
                bar.suspend(|| print(&text))?;
                bar.inc(count as u64);
            }
            None => print(&text)?,
        }
        Ok(())
    }
}

/// Lines of stdin (without `\n` or `\r\n`), read on a thread of their own:
/// a blocked read must not keep the runtime from shutting down on an error.
fn read_lines() -> mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel(1024);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            let item = match stdin.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if line.ends_with(b"\n") {
                        line.pop();
                        if line.ends_with(b"\r") {
                            line.pop();
                        }
                    }
                    Ok(line)
                }
                Err(e) => Err(e),
            };
            let failed = item.is_err();
            if tx.blocking_send(item).is_err() || failed {
                break;
            }
        }
    });
    rx
}

/// `redq subscribe`: prints each delivery on one line (text or JSON), acks
/// it once printed with `--ack`, stops after `--max`.
pub async fn subscribe(args: SubscribeArgs) -> Result<(), BoxError> {
    let SubscribeArgs {
        topic,
        subscription,
        ack,
        max,
        json,
        consumer,
        ack_deadline,
        start,
        ordered,
        pattern,
        server,
    } = args;
    let mut client = queue_client(connect(&server.server, &server.tls).await?);
    let (topic, pattern) = if pattern {
        (String::new(), topic)
    } else {
        (topic, String::new())
    };
    let request = pb::SubscribeRequest {
        topic: topic.clone(),
        pattern,
        subscription: subscription.clone(),
        consumer,
        // A small --max asks for no more than it will print.
        max_outstanding_messages: match max {
            Some(n) if n < 100 => n as u32,
            _ => 0,
        },
        ack_deadline: ack_deadline
            .map(|d| proto_duration("--ack-deadline", d))
            .transpose()?,
        start: match start {
            StartArg::Earliest => pb::StartPosition::Earliest,
            StartArg::Latest => pb::StartPosition::Latest,
        } as i32,
        retry_policy: None,
        max_delivery_attempts: 0,
        max_outstanding_bytes: 0,
        enable_message_ordering: ordered,
    };
    let mut stream = client
        .subscribe(request)
        .await
        .map_err(status_error)?
        .into_inner();
    let mut printed: u64 = 0;
    let settle = Settle {
        topic: &topic,
        subscription: &subscription,
        ack,
    };
    let last = loop {
        let Some(response) = stream.message().await.map_err(status_error)? else {
            return Ok(());
        };
        if response.dropped > 0 {
            eprintln!(
                "dropped {} message(s): the stream fell behind",
                response.dropped
            );
        }
        let mut received = response.messages;
        let room = max.map_or(usize::MAX, |max| (max - printed) as usize);
        let extra = received.split_off(received.len().min(room));
        let text: String = received
            .iter()
            .map(|m| {
                if json {
                    json_line(m)
                } else {
                    text_line(m, topic.is_empty())
                }
            })
            .collect();
        print(&text)?;
        printed += received.len() as u64;
        if max.is_some_and(|max| printed >= max) {
            break (received, extra);
        }
        settle.run(&mut client, received, extra).await?;
    };
    // Close the stream before the last acks: acks free room, and an open
    // stream with room would fetch more messages for nobody.
    drop(stream);
    settle.run(&mut client, last.0, last.1).await
}

/// What `subscribe` does with a response once printed.
struct Settle<'a> {
    topic: &'a str,
    subscription: &'a str,
    ack: bool,
}

impl Settle<'_> {
    /// Acks `printed` (with `--ack`) and gives `extra` (past `--max`) back.
    async fn run(
        &self,
        client: &mut Client,
        printed: Vec<pb::ReceivedMessage>,
        extra: Vec<pb::ReceivedMessage>,
    ) -> Result<(), BoxError> {
        // EPHEMERAL messages have no ack id: there is nothing to settle.
        let printed: Vec<_> = printed
            .into_iter()
            .filter(|m| !m.ack_id.is_empty())
            .collect();
        let extra: Vec<_> = extra.into_iter().filter(|m| !m.ack_id.is_empty()).collect();
        if self.ack && !printed.is_empty() {
            client
                .ack(pb::AckRequest {
                    topic: self.topic.to_string(),
                    subscription: self.subscription.to_string(),
                    ack_ids: printed.into_iter().map(|m| m.ack_id).collect(),
                })
                .await
                .map_err(status_error)?;
        }
        if !extra.is_empty() {
            // Redelivered at once rather than after their ack deadline (as a
            // new attempt). A failure changes nothing here: they come back anyway.
            let _ = client
                .nack(pb::NackRequest {
                    topic: self.topic.to_string(),
                    subscription: self.subscription.to_string(),
                    ack_ids: extra.into_iter().map(|m| m.ack_id).collect(),
                    delay: Some(prost_types::Duration::default()),
                })
                .await;
        }
        Ok(())
    }
}

/// `<id> attempt=<n> {k=v, …} <payload>`, after `<topic> ` on a pattern
/// stream.
fn text_line(received: &pb::ReceivedMessage, pattern: bool) -> String {
    let empty = pb::Message::default();
    let message = received.message.as_ref().unwrap_or(&empty);
    let topic = if pattern {
        format!("{} ", message.topic)
    } else {
        String::new()
    };
    format!(
        "{topic}{} attempt={} {} {}\n",
        message.id,
        received.delivery_attempt,
        format::attributes(&message.attributes),
        payload_inline(&message.payload)
    )
}

/// One JSON object: id, ack_id, attempt, attributes, ordering_key, times and
/// `payload` (UTF-8) or `payload_base64`.
fn json_line(received: &pb::ReceivedMessage) -> String {
    let empty = pb::Message::default();
    let message = received.message.as_ref().unwrap_or(&empty);
    let mut object = serde_json::Map::new();
    object.insert("id".into(), message.id.clone().into());
    object.insert("ack_id".into(), received.ack_id.clone().into());
    object.insert("attempt".into(), received.delivery_attempt.into());
    if let Some(ts) = &message.publish_time {
        object.insert("publish_time".into(), format::rfc3339(ts).into());
    }
    if let Some(ts) = &message.deliver_at {
        object.insert("deliver_at".into(), format::rfc3339(ts).into());
    }
    format::insert_message(&mut object, message);
    format::json_line(object)
}

/// `redq schedule`: one message due after `--delay` or at `--at`; prints its
/// id and due time.
pub async fn schedule(args: ScheduleArgs) -> Result<(), BoxError> {
    let ScheduleArgs {
        recurring,
        topic,
        payload,
        delay,
        at,
        message,
        server,
    } = args;
    if let Some(command) = recurring {
        return super::schedules::recurring(command).await;
    }
    // clap requires both unless a subcommand is given.
    let (Some(topic), Some(payload)) = (topic, payload) else {
        return Err("schedule: TOPIC and PAYLOAD are required".into());
    };
    let message = pb::PublishMessage {
        payload: payload.into_bytes().into(),
        ..template(&message, None)?
    };
    let delay = delay.map(|d| proto_duration("--delay", d)).transpose()?;
    let mut client = queue_client(connect(&server.server, &server.tls).await?);
    let response = client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic,
            message: Some(message),
            deliver_at: at,
            delay,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let pb::ScheduleDelayedResponse {
        message_id,
        deliver_at,
        duplicate,
    } = response;
    let mut line = format!(
        "{message_id} due {}",
        format::timestamp(deliver_at.as_ref())
    );
    if duplicate {
        line.push_str(" duplicate");
    }
    line.push('\n');
    print(&line)?;
    Ok(())
}

/// `redq cancel`: CancelScheduled; prints whether the message was cancelled.
pub async fn cancel(args: CancelArgs) -> Result<(), BoxError> {
    let CancelArgs {
        topic,
        message_id,
        server,
    } = args;
    let mut client = queue_client(connect(&server.server, &server.tls).await?);
    let cancelled = client
        .cancel_scheduled(pb::CancelScheduledRequest { topic, message_id })
        .await
        .map_err(status_error)?
        .into_inner()
        .cancelled;
    print(if cancelled {
        "cancelled\n"
    } else {
        "not cancelled: already delivered, already cancelled, or unknown\n"
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str, template: &pb::PublishMessage) -> Result<pb::PublishMessage, String> {
        serde_json::from_str::<JsonMessage>(line)
            .map_err(|e| e.to_string())
            .and_then(|m| m.into_message(template))
    }

    #[test]
    fn jsonl_lines_override_the_flags() {
        let template = pb::PublishMessage {
            attributes: HashMap::from([
                ("src".to_string(), "flag".to_string()),
                ("k".to_string(), "flag".to_string()),
            ]),
            ordering_key: "flag-key".into(),
            delay: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            ..Default::default()
        };
        let m = parse(
            r#"{"payload": "a", "attributes": {"k": "line"}, "deliver_at": "2030-01-01T00:00:00Z"}"#,
            &template,
        )
        .unwrap();
        assert_eq!(&m.payload[..], b"a");
        assert_eq!(m.attributes["k"], "line");
        assert_eq!(m.attributes["src"], "flag");
        assert_eq!(m.ordering_key, "flag-key");
        assert_eq!(m.delay, None);
        assert_eq!(m.deliver_at.map(|t| t.seconds), Some(1_893_456_000));

        let m = parse(r#"{"payload_base64": "/wA=", "delay": "1m"}"#, &template).unwrap();
        assert_eq!(&m.payload[..], [0xff, 0x00]);
        assert_eq!(m.delay.map(|d| d.seconds), Some(60));
    }

    #[test]
    fn bad_jsonl_lines_say_why() {
        let template = pb::PublishMessage::default();
        let err = |line: &str| parse(line, &template).unwrap_err();
        assert!(err(r#"{"payload": "a", "payload_base64": "YQ=="}"#).contains("exactly one"));
        assert!(err(r#"{"attributes": {}}"#).contains("exactly one"));
        assert!(err(r#"{"payload": "a", "delay": "1s", "deliver_at": "x"}"#).contains("exclusive"));
        assert!(err(r#"{"payload": "a", "deliver_at": "tomorrow"}"#).contains("deliver_at"));
        assert!(err(r#"{"payload_base64": "%%"}"#).contains("payload_base64"));
        assert!(err(r#"{"payloda": "a"}"#).contains("unknown field"));
    }
}
