// CuratorAdapter speaks splitbrain's client protocol (docs/client-protocol.md)
// on stdin/stdout for Apache Curator's InterProcessMutex, on the ZooKeeper
// ensemble named in hello. It is compiled with javac when the client image
// is built, against Debian's libcurator-recipes-java.
//
// One CuratorFramework (one ZooKeeper session, whose timeout is the lease
// TTL) per adapter; a new InterProcessMutex per acquisition, acquired and
// released on a thread of its own (Curator's mutex belongs to the thread
// that acquired it). The fencing token is the czxid of the holder's lock
// node, read after the grant and checked to belong to this session.
//
// Curator's release ignores a lock node that is already gone (an expired
// session), so a release first checks that the node is still this
// session's and answers not_owner when it is not. Connection-state changes
// (SUSPENDED on connection loss, LOST on session expiry or after a session
// timeout without a connection, RECONNECTED) are logged on stderr: Curator
// tells its listeners, not the holder of an InterProcessMutex.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public final class CuratorAdapter {
    /** Parent of every lock's parent znode, as for the other clients. */
    static final String LOCK_ROOT = "/splitbrain/locks";
    /** Kept back from a request's deadline for the reply's own work. */
    static final long MARGIN_MS = 60;
    /**
     * Kept back from an acquisition's deadline when Curator is told how
     * long to wait: it overruns its own timeout (thread wake-ups on a busy
     * machine), and the token still has to be read.
     */
    static final long WAIT_MARGIN_MS = 300;

    static final ObjectMapper JSON = new ObjectMapper();
    static PrintStream out;

    static CuratorFramework client;
    static final Map<String, Lease> leases = new ConcurrentHashMap<>();
    static final AtomicLong nextLease = new AtomicLong();
    static final ExecutorService handlers = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "request");
        t.setDaemon(true);
        return t;
    });

    /** A mutex acquired (or being acquired) on a thread of its own. */
    static final class Lease {
        final String id;
        final Mutex mutex;
        final ExecutorService thread = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "lease");
            t.setDaemon(true);
            return t;
        });
        volatile String node;
        volatile long token;

        Lease(String id, String path) {
            this.id = id;
            this.mutex = new Mutex(client, path);
        }
    }

    /** InterProcessMutex, with the path of this thread's own lock node. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework c, String path) {
            super(c, path);
        }

        String ownNode() {
            return getLockPath();
        }
    }

    public static void main(String[] args) throws Exception {
        // Protocol lines only on the real stdout; anything a library prints
        // goes to stderr, the adapter's log.
        out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode req;
            try {
                req = JSON.readTree(line);
            } catch (Exception e) {
                log("unreadable request: " + e.getMessage());
                continue;
            }
            long id = req.path("id").asLong();
            String type = req.path("type").asText();
            if (type.equals("hello")) {
                // Answered before any other request is read.
                handle(req, id, type);
                continue;
            }
            if (type.equals("close")) {
                close(id);
                return;
            }
            handlers.submit(() -> handle(req, id, type));
        }
        close(0);
    }

    static void handle(JsonNode req, long id, String type) {
        try {
            switch (type) {
                case "hello" -> hello(req, id);
                case "acquire" -> acquire(req, id);
                case "release" -> release(req, id);
                case "held" -> held(req, id);
                default -> send(reply(id, "error").put("message", "unsupported"));
            }
        } catch (Exception e) {
            log("request " + id + " (" + type + "): " + e);
            send(reply(id, "error").put("message", String.valueOf(e)));
        }
    }

    static void hello(JsonNode req, long id) throws Exception {
        String mode = "all";
        for (Iterator<Map.Entry<String, JsonNode>> it = req.path("options").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> o = it.next();
            if (!o.getKey().equals("endpoints")) {
                send(reply(id, "error").put("message", "unknown option " + o.getKey() + " (known: endpoints)"));
                return;
            }
            mode = o.getValue().asText();
        }
        List<String> eps = new ArrayList<>();
        req.path("endpoints").forEach(e -> eps.add(e.asText()));
        if (eps.isEmpty()) {
            send(reply(id, "error").put("message", "no endpoints"));
            return;
        }
        List<String> use;
        switch (mode) {
            case "all" -> use = eps;
            case "pinned" -> {
                int n;
                try {
                    n = Integer.parseInt(req.path("client").asText().substring(1));
                } catch (RuntimeException e) {
                    send(reply(id, "error").put("message", "pinned endpoints need a client named cN"));
                    return;
                }
                use = List.of(eps.get((n - 1) % eps.size()));
            }
            default -> {
                send(reply(id, "error").put("message", "endpoints=" + mode + ": want all or pinned"));
                return;
            }
        }
        int ttl = Math.max(req.path("ttl_ms").asInt(2000), 1);
        client = CuratorFrameworkFactory.builder()
                .connectString(String.join(",", use))
                .sessionTimeoutMs(ttl)
                .connectionTimeoutMs(ttl)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.getConnectionStateListenable().addListener((c, state) ->
                log("curator connection state " + state + " (session timeout " + ttl + " ms)"));
        client.start();
        if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
            send(reply(id, "error").put("message", "no ZooKeeper member reached in 15 s: " + use));
            return;
        }
        log("connected with Curator " + version() + ", ZooKeeper client " + org.apache.zookeeper.Version.getFullVersion());
        ObjectNode r = reply(id, "hello_ok");
        r.put("protocol", 1).put("library", "Apache Curator InterProcessMutex").put("version", version()).put("language", "java");
        r.putObject("offers").put("token", true).put("renew", true).put("renew_mode", "watchdog")
                .put("checked_release", true).put("held", true);
        send(r);
    }

    /** Curator's version, from curator-recipes' own Maven metadata. */
    static String version() {
        try (InputStream s = InterProcessMutex.class.getResourceAsStream(
                "/META-INF/maven/org.apache.curator/curator-recipes/pom.properties")) {
            Properties p = new Properties();
            p.load(s);
            return p.getProperty("version", "unknown");
        } catch (Exception e) {
            return "unknown";
        }
    }

    static void acquire(JsonNode req, long id) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(req.path("deadline_ms").asLong(5000));
        String key = req.path("key").asText();
        Lease l = new Lease("L" + nextLease.incrementAndGet(), LOCK_ROOT + "/" + key);
        long wait = Math.max(0, remaining(deadline) - WAIT_MARGIN_MS);
        Future<Boolean> f = l.thread.submit(() -> {
            if (!l.mutex.acquire(wait, TimeUnit.MILLISECONDS)) {
                return false;
            }
            l.node = l.mutex.ownNode();
            return true;
        });
        boolean got;
        try {
            got = f.get(Math.max(0, remaining(deadline) - MARGIN_MS), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            // Curator overran its own timeout: waiting for the lock while
            // connected (busy), or retrying a lost connection (unavailable).
            // Give up, and release whatever it gets later.
            l.thread.submit(() -> {
                try {
                    if (f.get()) {
                        l.mutex.release();
                    }
                } catch (Exception ignored) {
                    // the lock was not had
                }
                return null;
            });
            l.thread.shutdown();
            if (client.getZookeeperClient().isConnected()) {
                send(reply(id, "busy"));
            } else {
                send(reply(id, "unavailable").put("message", "Curator did not answer before the deadline, not connected"));
            }
            return;
        } catch (java.util.concurrent.ExecutionException e) {
            l.thread.shutdown();
            Throwable c = e.getCause();
            send(reply(id, "unavailable").put("message", "acquire: " + c));
            return;
        }
        if (!got) {
            l.thread.shutdown();
            if (client.getZookeeperClient().isConnected()) {
                send(reply(id, "busy"));
            } else {
                send(reply(id, "unavailable").put("message", "not connected: " + connection()));
            }
            return;
        }
        Stat st;
        try {
            st = client.checkExists().forPath(l.node);
        } catch (Exception e) {
            releaseQuietly(l);
            send(reply(id, "unavailable").put("message", "read token: " + e));
            return;
        }
        long sid = client.getZookeeperClient().getZooKeeper().getSessionId();
        if (st == null || st.getEphemeralOwner() != sid) {
            releaseQuietly(l);
            send(reply(id, "unavailable").put("message", "lock node " + l.node + " gone or not ours right after the grant"));
            return;
        }
        l.token = st.getCzxid();
        leases.put(l.id, l);
        send(reply(id, "granted").put("lease", l.id).put("token", l.token));
    }

    static void release(JsonNode req, long id) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(req.path("deadline_ms").asLong(1000));
        Lease l = leases.remove(req.path("lease").asText());
        if (l == null) {
            send(reply(id, "not_owner"));
            return;
        }
        Future<String> f = l.thread.submit(() -> {
            // Curator's own release deletes the node and ignores one that
            // is gone: ask first whether it is still ours.
            String answer = "ok";
            try {
                Stat st = client.checkExists().forPath(l.node);
                long sid = client.getZookeeperClient().getZooKeeper().getSessionId();
                if (st == null || st.getEphemeralOwner() != sid) {
                    answer = "not_owner";
                }
            } catch (KeeperException.ConnectionLossException | KeeperException.SessionExpiredException e) {
                answer = "unavailable";
            }
            try {
                l.mutex.release();
            } catch (Exception e) {
                log("release " + l.node + ": " + e);
                if (answer.equals("ok")) {
                    answer = "unavailable";
                }
            }
            return answer;
        });
        l.thread.shutdown();
        try {
            String answer = f.get(Math.max(0, remaining(deadline) - MARGIN_MS), TimeUnit.MILLISECONDS);
            ObjectNode r = reply(id, answer);
            if (answer.equals("unavailable")) {
                r.put("message", "connection " + connection());
            }
            send(r);
        } catch (TimeoutException e) {
            send(reply(id, "unavailable").put("message", "release did not finish before the deadline (connection " + connection() + ")"));
        }
    }

    static void held(JsonNode req, long id) throws Exception {
        Lease l = leases.get(req.path("lease").asText());
        if (l == null) {
            send(reply(id, "held").put("held", false));
            return;
        }
        try {
            Stat st = client.checkExists().forPath(l.node);
            long sid = client.getZookeeperClient().getZooKeeper().getSessionId();
            send(reply(id, "held").put("held", st != null && st.getEphemeralOwner() == sid));
        } catch (Exception e) {
            send(reply(id, "unavailable").put("message", String.valueOf(e)));
        }
    }

    static void releaseQuietly(Lease l) {
        l.thread.submit(() -> {
            try {
                l.mutex.release();
            } catch (Exception e) {
                log("release " + l.node + ": " + e);
            }
            return null;
        });
        l.thread.shutdown();
    }

    static void close(long id) {
        if (client != null) {
            client.close();
        }
        if (id > 0) {
            send(reply(id, "closed"));
        }
        out.flush();
        System.exit(0);
    }

    static String connection() {
        return client != null && client.getZookeeperClient().isConnected() ? "up" : "down";
    }

    static long remaining(long deadline) {
        return TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
    }

    static ObjectNode reply(long id, String type) {
        ObjectNode r = JSON.createObjectNode();
        r.put("id", id).put("type", type);
        return r;
    }

    static synchronized void send(ObjectNode r) {
        try {
            out.println(JSON.writeValueAsString(r));
            out.flush();
        } catch (Exception e) {
            log("write reply: " + e);
        }
    }

    static void log(String msg) {
        System.err.println(LocalTime.now() + " curator-adapter: " + msg);
        System.err.flush();
    }
}
