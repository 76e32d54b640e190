#!/usr/bin/env python3
"""A splitbrain client adapter for redis-py's Lock (redis.lock.Lock).

It speaks the client protocol (docs/client-protocol.md): one JSON request
per line on stdin, one JSON reply per line on stdout, logs on stderr.
Debian's python3-redis is all it needs.
"""
import json
import sys
import time

import redis
from redis.exceptions import ConnectionError, LockError, LockNotOwnedError, RedisError, TimeoutError

UNREACHABLE = (ConnectionError, TimeoutError)


def send(reply):
    # One line, flushed at once: a reply left in a buffer is a late reply.
    sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(*words):
    print(*words, file=sys.stderr, flush=True)


class Adapter:
    def __init__(self):
        self.redis = None
        self.ttl = 2.0
        self.locks = {}  # lease -> redis.lock.Lock
        self.leases = 0

    def hello(self, req):
        options = req.get("options") or {}
        if options:
            return {"type": "error", "message": "unknown option(s): " + ", ".join(sorted(options))}
        host, port = req["endpoints"][0].rsplit(":", 1)
        self.redis = redis.Redis(host=host, port=int(port), socket_timeout=0.5, socket_connect_timeout=0.5)
        self.ttl = req["ttl_ms"] / 1000
        return {
            "type": "hello_ok", "protocol": 1, "library": "redis-py", "version": redis.__version__,
            "language": "python",
            # Lock has no fencing token, renews only when told to extend,
            # and releases by compare-and-delete on its random token.
            "offers": {"token": False, "renew": False, "renew_mode": "none", "checked_release": True, "held": True},
        }

    def acquire(self, req):
        deadline = time.monotonic() + req["deadline_ms"] / 1000
        lock = self.redis.lock("lock:" + req["key"], timeout=req.get("ttl_ms", self.ttl * 1000) / 1000,
                               sleep=0.02, thread_local=False)
        unreachable = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                if lock.acquire(blocking=True, blocking_timeout=left):
                    self.leases += 1
                    lease = str(self.leases)
                    self.locks[lease] = lock
                    return {"type": "granted", "lease": lease}
                return {"type": "busy"}  # held by another until the deadline
            except UNREACHABLE as e:
                unreachable = str(e) or type(e).__name__
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        if unreachable:
            return {"type": "unavailable", "message": unreachable}
        return {"type": "busy"}

    def release(self, req):
        lock = self.locks.pop(req["lease"], None)
        if lock is None:
            return {"type": "not_owner"}
        try:
            lock.release()
            return {"type": "ok"}
        except LockNotOwnedError:
            return {"type": "not_owner"}  # expired, maybe taken by another
        except UNREACHABLE as e:
            return {"type": "unavailable", "message": str(e) or type(e).__name__}
        except LockError as e:
            return {"type": "not_owner", "message": str(e)}

    def held(self, req):
        lock = self.locks.get(req["lease"])
        if lock is None:
            return {"type": "held", "held": False}
        try:
            return {"type": "held", "held": bool(lock.owned())}
        except UNREACHABLE as e:
            return {"type": "unavailable", "message": str(e) or type(e).__name__}


def main():
    adapter = Adapter()
    handlers = {"hello": adapter.hello, "acquire": adapter.acquire, "release": adapter.release, "held": adapter.held}
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
