#!/usr/bin/env python3
"""A splitbrain client adapter: MariaDB named locks with PyMySQL.

It speaks the client protocol (docs/client-protocol.md): one JSON request
per line on stdin, one JSON reply per line on stdout, logs on stderr.
Debian's python3-pymysql is all it needs. Each grant has a session of its
own: GET_LOCK, then the next value of the fencing counter in the same session;
RELEASE_LOCK and the session closed at release.
"""
import json
import math
import socket
import sys

import pymysql

USER = "splitbrain"
DATABASE = "splitbrain"
FENCE = "splitbrain.splitbrain_fence"
# The backend's own options (server variables): the server takes them.
SERVER_OPTIONS = {"wait_timeout", "tcp_keepalive_time", "tcp_keepalive_interval", "tcp_keepalive_probes", "lock_wait_timeout"}


def send(reply):
    sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(*words):
    print(*words, file=sys.stderr, flush=True)


def timed_out(e):
    return isinstance(e, (socket.timeout, TimeoutError)) or "timed out" in str(e)


class Adapter:
    def __init__(self):
        self.host, self.port = None, 3306
        self.wait_timeout = None  # the session's, in whole seconds; None: the server's
        self.leases = {}  # lease -> (connection, key)
        self.count = 0

    def hello(self, req):
        options = dict(req.get("options") or {})
        timeout = options.pop("timeout", "ttl")
        unknown = sorted(k for k in options if k not in SERVER_OPTIONS)
        if unknown:
            return {"type": "error", "message": "unknown option(s): " + ", ".join(unknown)}
        if timeout == "ttl":
            self.wait_timeout = max(1, math.ceil(req["ttl_ms"] / 1000))
        elif timeout != "none":
            return {"type": "error", "message": "timeout=%s: want ttl or none" % timeout}
        host, port = req["endpoints"][0].rsplit(":", 1)
        self.host, self.port = host, int(port)
        return {
            "type": "hello_ok", "protocol": 1, "library": "PyMySQL", "version": pymysql.__version__,
            "language": "python",
            # The token is the next value of a counter row, taken while
            # the lock is held; RELEASE_LOCK releases only this session's lock.
            "offers": {"token": True, "renew": False, "renew_mode": "none", "checked_release": True, "held": True},
        }

    def connect(self, seconds):
        init = "SET SESSION wait_timeout=%d" % self.wait_timeout if self.wait_timeout else None
        return pymysql.connect(host=self.host, port=self.port, user=USER, database=DATABASE, autocommit=True,
                               connect_timeout=max(0.1, min(2.0, seconds)), read_timeout=max(0.1, seconds),
                               write_timeout=max(0.1, seconds), init_command=init)

    def acquire(self, req):
        seconds = req["deadline_ms"] / 1000
        try:
            conn = self.connect(seconds)
        except pymysql.err.MySQLError as e:
            return {"type": "unavailable", "message": str(e)}
        try:
            with conn.cursor() as cur:
                # The server answers 0 a little before the deadline: busy,
                # told apart from a server that does not answer.
                cur.execute("SELECT GET_LOCK(%s, %s)", ("splitbrain/" + req["key"], max(0.0, seconds - 0.3)))
                got = cur.fetchone()[0]
                if got is None:
                    conn.close()
                    return {"type": "unavailable", "message": "GET_LOCK answered NULL"}
                if got != 1:
                    conn.close()
                    return {"type": "busy"}
                cur.execute("UPDATE " + FENCE + " SET v = LAST_INSERT_ID(v + 1) WHERE id = 1")
                cur.execute("SELECT LAST_INSERT_ID()")
                token = int(cur.fetchone()[0])
        except pymysql.err.MySQLError as e:
            conn.close()
            return {"type": "unavailable", "message": str(e)}
        self.count += 1
        lease = str(self.count)
        self.leases[lease] = (conn, req["key"])
        return {"type": "granted", "lease": lease, "token": token}

    def release(self, req):
        conn, key = self.leases.pop(req["lease"], (None, None))
        if conn is None:
            return {"type": "not_owner"}
        conn._read_timeout = conn._write_timeout = max(0.1, req["deadline_ms"] / 1000)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", ("splitbrain/" + key,))
                released = cur.fetchone()[0]
            return {"type": "ok"} if released == 1 else {"type": "not_owner"}
        except pymysql.err.MySQLError as e:
            if timed_out(e):
                return {"type": "unavailable", "message": str(e)}
            # The server ended the session, and its lock with it.
            return {"type": "not_owner", "message": str(e)}
        finally:
            try:
                conn.close()
            except Exception:
                pass

    def held(self, req):
        conn, key = self.leases.get(req["lease"], (None, None))
        if conn is None:
            return {"type": "held", "held": False}
        conn._read_timeout = conn._write_timeout = max(0.1, req["deadline_ms"] / 1000)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", ("splitbrain/" + key,))
                return {"type": "held", "held": cur.fetchone()[0] == 1}
        except pymysql.err.MySQLError as e:
            if timed_out(e):
                return {"type": "unavailable", "message": str(e)}
            return {"type": "held", "held": False}


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
        except Exception as e:  # the protocol's "anything else"
            reply = {"type": "error", "message": repr(e)}
        reply["id"] = req["id"]
        send(reply)


if __name__ == "__main__":
    main()
