// Package postgres is the counter store in a real database: each counter
// is a row of a PostgreSQL 15 table (Debian's postgresql-15, run as the
// store node's main process by `splitbrain postgres-store`), and the fence
// is where the write happens, in the database itself.
//
//	CREATE TABLE counter (key text PRIMARY KEY, value bigint, tag bigint,
//	                      token bigint, version bigint)
//
// The writes, by mode:
//
//   - unfenced: a plain UPDATE of value and tag (and version+1);
//   - fenced (a token given): one conditional UPDATE ... WHERE token <= $t,
//     which records $t as the row's token: the check and the write are
//     one atomic statement, and a write that matches no row is refused as
//     stale. A fenced read marks the row the same way (UPDATE SET token =
//     $t WHERE token <= $t RETURNING ...), so a stale holder's write
//     cannot land between a newer holder's read and its write; an equal
//     token is the holder's own mark from its read.
//   - check=version (--store-opt), for lock clients with no token: every
//     read returns the row's version, and the write is UPDATE ... WHERE
//     version = <the version this client read>: a write whose read is no
//     longer current — someone wrote in between — is refused as stale.
//
// A refused write is reported as the built-in store reports a fencing
// rejection ([store.StaleError]).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/pgserver"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

// Name is the store's name (--store postgres).
const Name = "postgres"

// Role is the image role of its node: the postgres backend's image
// (Debian's postgresql-15), declared with the same packages.
const Role = "postgres"

// Checks (--store-opt check=...).
const (
	// CheckToken: fenced writes are conditional on the token; unfenced
	// ones are plain.
	CheckToken = "token"
	// CheckVersion: every write is conditional on the version its
	// critical section read.
	CheckVersion = "version"
)

// Schema creates the counter table.
const Schema = "CREATE TABLE IF NOT EXISTS counter (key text PRIMARY KEY, value bigint NOT NULL DEFAULT 0, " +
	"tag bigint NOT NULL DEFAULT 0, token bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0)"

// ServerProgram is the store node's main process, `splitbrain
// postgres-store`: initdb when the data directory is empty, then exec the
// postmaster.
var ServerProgram = targets.Program{
	Name:  "postgres-store",
	Short: "PostgreSQL as the counter store: initdb when the data directory is empty, then exec postgres (runs inside the store node)",
	Flags: pgserver.Flags,
}

// CheckOption (--store-opt check=...) says what a write is conditional on.
var CheckOption = option.Enum("check",
	"token: fenced writes are one conditional UPDATE on the token, unfenced ones plain; version: every write is conditional on the row version its critical section read (for clients with no token)",
	CheckToken, CheckVersion)

func init() {
	store.Register(store.Kind{
		Name:     Name,
		Title:    "the counter as a row of PostgreSQL 15: conditional UPDATE on the token, or on the version read",
		Role:     Role,
		Packages: pgserver.Packages,
		Options:  option.Decls(CheckOption),
		Programs: []targets.Program{ServerProgram},
		Deploy:   Deploy,
		Dial: func(addr string, timeout time.Duration, opts option.Set) (store.Counter, error) {
			return NewClient(addr, timeout, CheckOption.Get(opts)), nil
		},
		Versions: Versions,
	})
}

// Deploy starts PostgreSQL as node "store" from image, waits until it
// answers and creates the counter table (with psql inside the node, over
// the exec channel partitions do not cut).
func Deploy(ctx context.Context, rt runtime.Runtime, image string, _ option.Set) (runtime.Node, string, error) {
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: store.Role, Role: store.Role, Image: image,
		Cmd:  pgserver.Command(images.Self.Dest, ServerProgram.Name, nil),
		Caps: []string{runtime.CapNetAdmin},
	})
	if err != nil {
		return nil, "", fmt.Errorf("start postgres store: %w", err)
	}
	err = runtime.Poll(ctx, "postgres store not serving (see the store's log in the results directory)", 60*time.Second, 200*time.Millisecond,
		func(ctx context.Context) error {
			_, err := runtime.Run(ctx, n, psql(Schema)...)
			return err
		})
	if err != nil {
		return nil, "", err
	}
	return n, net.JoinHostPort(n.Addr().String(), strconv.Itoa(pgserver.Port)), nil
}

// psql is the command line running sql with psql inside the node.
func psql(sql string) []string {
	return []string{"psql", "-h", "127.0.0.1", "-p", strconv.Itoa(pgserver.Port), "-U", pgserver.Superuser,
		"-d", pgserver.Database, "-v", "ON_ERROR_STOP=1", "-qAtc", sql}
}

// Versions reports the store's PostgreSQL version.
func Versions(ctx context.Context, n runtime.Node) map[string]string {
	out := map[string]string{"store_postgres": "unknown"}
	if b, err := runtime.Run(ctx, n, psql("SHOW server_version")...); err == nil {
		out["store_postgres"] = strings.TrimSpace(string(b))
	}
	return out
}

// Client is a client of the postgres store: one connection, opened on
// first use and again after a failure. It is safe for concurrent use
// (requests take turns on the connection).
type Client struct {
	connString string
	timeout    time.Duration
	check      string

	mu   sync.Mutex
	conn *pgx.Conn
	// rows are the keys whose row this client knows exists.
	rows map[string]bool
	// versions is, per key, the version of this client's last read
	// (check=version): the version its write must still find.
	versions map[string]int64
}

var _ store.Counter = (*Client)(nil)

// NewClient returns a client of the store at addr whose writes are
// conditional as check ([CheckOption]'s value) says.
func NewClient(addr string, timeout time.Duration, check string) *Client {
	return &Client{connString: pgserver.ConnString(addr, "splitbrain-store"), timeout: timeout, check: check,
		rows: map[string]bool{}, versions: map[string]int64{}}
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := c.conn.Close(ctx)
		c.conn = nil
		return err
	}
	return nil
}

const returning = " RETURNING value, tag, token, version"

// row is a counter row.
type row struct {
	e       store.Entry
	version int64
}

// do runs f on the connection (connecting first if needed) within the
// request timeout, and classifies its failure: not connected or refused by
// the server (nothing applied: store.ErrUnreachable), or sent without an
// answer (store.ErrIndeterminate, and the connection is dropped).
func (c *Client) do(ctx context.Context, what, key string, f func(ctx context.Context, conn *pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.conn == nil || c.conn.IsClosed() {
		cfg, err := pgx.ParseConfig(c.connString)
		if err != nil {
			return fmt.Errorf("store %s %s: %w", what, key, err)
		}
		cfg.ConnectTimeout = c.timeout
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("store %s %s: %w: %w", what, key, store.ErrUnreachable, err)
		}
		c.conn = conn
		clear(c.rows)
	}
	err := func() error {
		if !c.rows[key] {
			if _, err := c.conn.Exec(ctx, "INSERT INTO counter (key) VALUES ($1) ON CONFLICT DO NOTHING", key); err != nil {
				return err
			}
			c.rows[key] = true
		}
		return f(ctx, c.conn)
	}()
	var pe *pgconn.PgError
	var stale *store.StaleError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &stale):
		return fmt.Errorf("store %s %s: %w", what, key, err)
	case errors.Is(err, store.ErrUnreachable):
		return fmt.Errorf("store %s %s: %w", what, key, err)
	case errors.As(err, &pe):
		// The server refused the statement: it was not applied.
		return fmt.Errorf("store %s %s: %w: %w", what, key, store.ErrUnreachable, err)
	default:
		_ = c.conn.Close(context.WithoutCancel(ctx))
		c.conn = nil
		return fmt.Errorf("store %s %s: %w: %w", what, key, store.ErrIndeterminate, err)
	}
}

func scan(r pgx.Row) (row, error) {
	var out row
	var tok int64
	err := r.Scan(&out.e.Value, &out.e.Tag, &tok, &out.version)
	out.e.Token = uint64(tok)
	return out, err
}

// staleError reads the row's current token (or version) for the refusal.
func staleError(ctx context.Context, conn *pgx.Conn, key string, presented uint64, version bool) error {
	col := "token"
	if version {
		col = "version"
	}
	var cur int64
	if err := conn.QueryRow(ctx, "SELECT "+col+" FROM counter WHERE key = $1", key).Scan(&cur); err != nil {
		return err
	}
	return &store.StaleError{Token: presented, Highest: uint64(cur)}
}

func toInt(token uint64) (int64, error) {
	if token > math.MaxInt64 {
		return 0, &store.StaleError{Token: token}
	}
	return int64(token), nil
}

// Read implements store.Counter.
func (c *Client) Read(ctx context.Context, key string, fenced bool, token uint64) (store.Entry, error) {
	var out row
	err := c.do(ctx, "read", key, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		if !fenced {
			out, err = scan(conn.QueryRow(ctx, "SELECT value, tag, token, version FROM counter WHERE key = $1", key))
			return err
		}
		t, err := toInt(token)
		if err != nil {
			return err
		}
		out, err = scan(conn.QueryRow(ctx, "UPDATE counter SET token = $2 WHERE key = $1 AND token <= $2"+returning, key, t))
		if errors.Is(err, pgx.ErrNoRows) {
			return staleError(ctx, conn, key, token, false)
		}
		return err
	})
	if err != nil {
		var stale *store.StaleError
		if errors.As(err, &stale) {
			return store.Entry{Token: stale.Highest}, err
		}
		return store.Entry{}, err
	}
	if c.check == CheckVersion {
		c.mu.Lock()
		c.versions[key] = out.version
		c.mu.Unlock()
	}
	return out.e, nil
}

// Write implements store.Counter.
func (c *Client) Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (store.Entry, error) {
	var out row
	err := c.do(ctx, "write", key, func(ctx context.Context, conn *pgx.Conn) error {
		sql := "UPDATE counter SET value = $2, tag = $3, version = version + 1"
		args := []any{key, value, tag}
		where := " WHERE key = $1"
		if fenced {
			t, err := toInt(token)
			if err != nil {
				return err
			}
			args = append(args, t)
			sql += ", token = $4"
			where += " AND token <= $4"
		}
		version, checked := c.versions[key]
		if c.check == CheckVersion {
			if !checked {
				return fmt.Errorf("%w: check=version: no read of %s before its write", store.ErrUnreachable, key)
			}
			delete(c.versions, key)
			args = append(args, version)
			where += fmt.Sprintf(" AND version = $%d", len(args))
		}
		var err error
		out, err = scan(conn.QueryRow(ctx, sql+where+returning, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			if c.check == CheckVersion {
				var cur row
				if cur, err = scan(conn.QueryRow(ctx, "SELECT value, tag, token, version FROM counter WHERE key = $1", key)); err != nil {
					return err
				}
				if fenced && cur.e.Token > token {
					return &store.StaleError{Token: token, Highest: cur.e.Token}
				}
				return &store.StaleError{Token: uint64(version), Highest: uint64(cur.version)}
			}
			return staleError(ctx, conn, key, token, false)
		}
		return err
	})
	if err != nil {
		var stale *store.StaleError
		if errors.As(err, &stale) {
			return store.Entry{Token: stale.Highest}, err
		}
		return store.Entry{}, err
	}
	return out.e, nil
}
