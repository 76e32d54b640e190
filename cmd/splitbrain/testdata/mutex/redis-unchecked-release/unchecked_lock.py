#!/usr/bin/env python3
"""A client adapter (docs/client-protocol.md) with a release bug, a fixture
of the mutual-exclusion tests.

It takes the lock with SET key value NX PX ttl, as a correct Redis lock
does, but its release is a plain DEL of the key: it never checks that the
key still holds its own value. A holder paused past its TTL wakes, writes,
and releases, deleting the lock of the client that took the key since; a
third client then takes a lock that is still alive. It says so honestly
(checked_release: false); the verdict must not need that.

Debian's python3-redis is all it needs.
"""
import json
import sys
import time

import redis
from redis.exceptions import ConnectionError, RedisError, TimeoutError

UNREACHABLE = (ConnectionError, TimeoutError)


def send(reply):
    sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(*words):
    print(*words, file=sys.stderr, flush=True)


class Adapter:
    def __init__(self):
        self.redis = None
        self.name = "c?"
        self.ttl_ms = 2000
        self.locks = {}  # lease -> key
        self.n = 0

    def hello(self, req):
        options = req.get("options") or {}
        if options:
            return {"type": "error", "message": "unknown option(s): " + ", ".join(sorted(options))}
        host, port = req["endpoints"][0].rsplit(":", 1)
        self.redis = redis.Redis(host=host, port=int(port), socket_timeout=0.5, socket_connect_timeout=0.5)
        self.name = req.get("client", self.name)
        self.ttl_ms = req["ttl_ms"]
        return {
            "type": "hello_ok", "protocol": 1, "library": "redis-py (SET NX PX, DEL)", "version": redis.__version__,
            "language": "python",
            "offers": {"token": False, "renew": False, "renew_mode": "none", "checked_release": False, "held": False},
        }

    def acquire(self, req):
        # Stop trying 100 ms before the deadline, to answer in time.
        deadline = time.monotonic() + req["deadline_ms"] / 1000 - 0.1
        key = "fixture-lock:" + req["key"]
        value = "%s-%d" % (self.name, req["id"])
        unreachable = None
        while time.monotonic() < deadline:
            try:
                if self.redis.set(key, value, nx=True, px=req.get("ttl_ms", self.ttl_ms)):
                    self.n += 1
                    lease = str(self.n)
                    self.locks[lease] = key
                    return {"type": "granted", "lease": lease}
                unreachable = None
            except UNREACHABLE as e:
                unreachable = str(e) or type(e).__name__
            time.sleep(0.02)
        if unreachable:
            return {"type": "unavailable", "message": unreachable}
        return {"type": "busy"}

    def release(self, req):
        key = self.locks.pop(req["lease"], None)
        if key is None:
            return {"type": "not_owner"}
        try:
            self.redis.delete(key)  # the bug: whoever holds it now loses it
            return {"type": "ok"}
        except UNREACHABLE as e:
            return {"type": "unavailable", "message": str(e) or type(e).__name__}


def main():
    adapter = Adapter()
    handlers = {"hello": adapter.hello, "acquire": adapter.acquire, "release": adapter.release}
    for line in sys.stdin:
        req = json.loads(line)
        if req["type"] == "close":
            send({"id": req["id"], "type": "closed"})
            return
        handler = handlers.get(req["type"])
        try:
            reply = handler(req) if handler else {"type": "error", "message": "unsupported"}
        except RedisError as e:
            reply = {"type": "error", "message": repr(e)}
        reply["id"] = req["id"]
        send(reply)


if __name__ == "__main__":
    main()
