"""The installed wheel, used as a user would: publish one message to a new topic at
$REDQ_ADDR, receive it through a Subscriber, ack it and wait for the server's
confirmation. Exits 0, or fails with the reason (every wait is bounded).

test.sh runs it in a fresh virtual environment holding only the wheel and its
dependencies (no grpcio-tools), with HOME an empty directory it checks stays
empty, and type-checks it with `mypy --strict` against the installed wheel: so
it is written as a typed user's code would be.
"""

import importlib.resources
import os
import queue
import sys
import uuid
from concurrent.futures import Future
from typing import Tuple

import redq

TIMEOUT = 15.0  # seconds, for each step


def main() -> int:
    package = importlib.resources.files("redq")
    assert "site-packages" in str(package), f"redq was imported from {package}, not from the installed wheel"
    assert package.joinpath("py.typed").is_file(), "the installed package has no redq/py.typed"
    topic = f"wheel-smoke-{uuid.uuid4().hex[:12]}"
    payload = b"through the installed wheel"
    received: "queue.Queue[Tuple[redq.Message, Future[None]]]" = queue.Queue()

    def handle(message: redq.Message) -> None:
        received.put((message, message.ack()))

    with redq.Client(timeout=TIMEOUT) as client:
        client.create_topic(topic)
        try:
            with redq.Subscriber() as subscriber:
                subscription = subscriber.subscribe(topic, "smoke", handle, start="earliest")
                subscription.ready(TIMEOUT)
                with redq.Publisher() as publisher:
                    message_id: str = publisher.publish(topic, payload, attributes={"via": "wheel"}).result(TIMEOUT)
                message, acked = received.get(timeout=TIMEOUT)
                acked.result(TIMEOUT)  # the server confirmed it applied the ack
                assert (message.id, message.payload, message.attributes) == (message_id, payload, {"via": "wheel"}), \
                    message
        finally:
            client.delete_topic(topic)
    print(f"wheel smoke: published {message_id} to {topic} at {os.environ.get('REDQ_ADDR')}, received and acked it "
          f"(redq from {package})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
