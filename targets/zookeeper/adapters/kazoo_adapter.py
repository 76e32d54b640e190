"""splitbrain client protocol (docs/client-protocol.md) adapter for Kazoo's Lock.

It speaks JSON lines on stdin/stdout for kazoo.recipe.lock.Lock (Debian's
python3-kazoo) on the ZooKeeper ensemble named in hello. One KazooClient (one
ZooKeeper session, whose timeout is the lease TTL) per adapter; a new Lock per
acquisition. The fencing token is the czxid of the holder's lock node, read
after the grant and checked to belong to this session.

Kazoo's release ignores a lock node that is already gone (an expired session),
so a release first checks that the node is still this session's and answers
not_owner when it is not. Kazoo tells connection-state listeners SUSPENDED on
connection loss and LOST when the session expired; the holder of a Lock is not
told. Both are logged on stderr.
"""

import json
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry
import kazoo.version

LOCK_ROOT = "/splitbrain/locks"
# Kept back from a request's deadline for the reply's own work.
MARGIN = 0.06
# Kept back from an acquisition's deadline when Kazoo is told how long to
# wait: it overruns its own timeout (thread wake-ups on a busy machine), and
# the token still has to be read.
WAIT_MARGIN = 0.3

out = sys.stdout
sys.stdout = sys.stderr  # protocol lines only on the real stdout
out_lock = threading.Lock()
client = None
leases = {}
leases_lock = threading.Lock()
next_lease = [0]


def log(msg):
    sys.stderr.write("%s kazoo-adapter: %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def send(reply):
    with out_lock:
        out.write(json.dumps(reply, separators=(",", ":")) + "\n")
        out.flush()


def session_id():
    cid = client.client_id
    return cid[0] if cid else None


def still_ours(path):
    """Whether the lock node at path exists and belongs to this session."""
    st = client.exists(path)
    return st is not None and st.ephemeralOwner == session_id()


def hello(req):
    global client
    mode = "all"
    for k, v in (req.get("options") or {}).items():
        if k != "endpoints":
            return {"type": "error", "message": "unknown option %s (known: endpoints)" % k}
        mode = v
    eps = req.get("endpoints") or []
    if not eps:
        return {"type": "error", "message": "no endpoints"}
    if mode == "pinned":
        try:
            n = int(req.get("client", "")[1:])
        except ValueError:
            return {"type": "error", "message": "pinned endpoints need a client named cN"}
        eps = [eps[(n - 1) % len(eps)]]
    elif mode != "all":
        return {"type": "error", "message": "endpoints=%s: want all or pinned" % mode}
    ttl = max(req.get("ttl_ms", 2000), 1) / 1000.0
    client = KazooClient(
        hosts=",".join(eps), timeout=ttl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=0.5))
    client.add_listener(lambda state: log("kazoo connection state %s (session timeout %.0f ms)" % (state, ttl * 1000)))
    try:
        client.start(timeout=15)
    except Exception as e:  # kazoo raises a handler-specific timeout
        return {"type": "error", "message": "no ZooKeeper member reached in 15 s: %s (%s)" % (eps, e)}
    log("connected with Kazoo %s" % kazoo.version.__version__)
    return {"type": "hello_ok", "protocol": 1, "library": "Kazoo Lock", "version": kazoo.version.__version__,
            "language": "python",
            "offers": {"token": True, "renew": True, "renew_mode": "watchdog", "checked_release": True, "held": True}}


def acquire(req):
    deadline = time.monotonic() + req.get("deadline_ms", 5000) / 1000.0
    lock = Lock(client, LOCK_ROOT + "/" + req["key"])
    wait = max(0.0, deadline - time.monotonic() - WAIT_MARGIN)
    result = {}
    done = threading.Event()

    def run():
        try:
            result["got"] = lock.acquire(timeout=wait)
        except LockTimeout:
            result["got"] = False
        except Exception as e:  # connection loss, session expiry, retries spent
            result["err"] = e
        done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic() - MARGIN)):
        # Kazoo overran its own timeout: waiting for the lock while
        # connected (busy), or retrying a lost connection (unavailable).
        # Give up, and release whatever it gets later.
        def later():
            done.wait()
            if result.get("got"):
                try:
                    lock.release()
                except KazooException as e:
                    log("release of a late grant: %s" % e)
        threading.Thread(target=later, daemon=True).start()
        if client.connected:
            return {"type": "busy"}
        return {"type": "unavailable", "message": "Kazoo did not answer before the deadline (state %s)" % client.state}
    if "err" in result:
        return {"type": "unavailable", "message": "acquire: %r" % result["err"]}
    if not result["got"]:
        if client.connected:
            return {"type": "busy"}
        return {"type": "unavailable", "message": "not connected (state %s)" % client.state}
    path = lock.path + "/" + lock.node
    try:
        st = client.exists(path)
    except KazooException as e:
        release_quietly(lock)
        return {"type": "unavailable", "message": "read token: %r" % e}
    if st is None or st.ephemeralOwner != session_id():
        release_quietly(lock)
        return {"type": "unavailable", "message": "lock node %s gone or not ours right after the grant" % path}
    with leases_lock:
        next_lease[0] += 1
        lid = "L%d" % next_lease[0]
        leases[lid] = (lock, path)
    return {"type": "granted", "lease": lid, "token": st.czxid}


def release_quietly(lock):
    try:
        lock.release()
    except KazooException as e:
        log("release: %s" % e)


def release(req):
    with leases_lock:
        entry = leases.pop(req.get("lease"), None)
    if entry is None:
        return {"type": "not_owner"}
    lock, path = entry
    # Kazoo's release deletes the node and ignores one that is gone: ask
    # first whether it is still ours.
    try:
        answer = {"type": "ok"} if still_ours(path) else {"type": "not_owner"}
    except KazooException as e:
        answer = {"type": "unavailable", "message": "check owner: %r" % e}
    try:
        lock.release()
    except KazooException as e:
        log("release %s: %r" % (path, e))
        if answer["type"] == "ok":
            answer = {"type": "unavailable", "message": "release: %r" % e}
    return answer


def held(req):
    with leases_lock:
        entry = leases.get(req.get("lease"))
    if entry is None:
        return {"type": "held", "held": False}
    try:
        return {"type": "held", "held": still_ours(entry[1])}
    except KazooException as e:
        return {"type": "unavailable", "message": repr(e)}


HANDLERS = {"acquire": acquire, "release": release, "held": held}


def handle(req, handler):
    rid = req.get("id", 0)
    try:
        reply = handler(req)
    except Exception as e:
        log("request %s (%s): %r" % (rid, req.get("type"), e))
        reply = {"type": "error", "message": repr(e)}
    reply = dict(reply)
    reply["id"] = rid
    send(reply)


def close(rid):
    if client is not None:
        try:
            client.stop()
            client.close()
        except Exception as e:
            log("close: %r" % e)
    if rid:
        send({"id": rid, "type": "closed"})
    sys.exit(0)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            log("unreadable request: %s" % e)
            continue
        typ = req.get("type")
        if typ == "hello":
            handle(req, hello)  # answered before any other request is read
        elif typ == "close":
            close(req.get("id", 0))
        elif typ in HANDLERS:
            threading.Thread(target=handle, args=(req, HANDLERS[typ]), daemon=True).start()
        else:
            send({"id": req.get("id", 0), "type": "error", "message": "unsupported"})
    close(0)


if __name__ == "__main__":
    main()
