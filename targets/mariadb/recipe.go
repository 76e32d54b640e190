package mariadb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/splitbrain/splitbrain/targets"

	"github.com/splitbrain/splitbrain/internal/option"
)

// ClientLibrary is the Go driver the recipe uses.
const ClientLibrary = "github.com/go-sql-driver/mysql"

// Timeout says whether an idle holder's session ends.
var Timeout = option.Enum("timeout",
	"ttl: the holder's session ends when idle past the lease TTL (its wait_timeout, whole seconds), releasing the lock; none: the lock lasts until the server notices the client gone",
	TimeoutTTL, TimeoutNone)

// Values of [Timeout].
const TimeoutTTL, TimeoutNone = "ttl", "none"

// RecipeOptions are the declarations of the recipe's options.
func RecipeOptions() []option.Decl { return option.Decls(Timeout) }

// Locker takes named locks for one client. Each grant has a connection (a
// session) of its own, opened by Acquire and closed by Release: a named
// lock lives exactly as long as that session.
type Locker struct {
	endpoint string
	client   string
	// idle is the session's wait_timeout (0: the server's).
	idle time.Duration
	log  *slog.Logger
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("mariadb recipe: no endpoint")
	}
	l := &Locker{endpoint: cfg.Endpoints[0], client: client, log: log}
	if Timeout.Get(cfg.Options) == TimeoutTTL {
		if cfg.TTL <= 0 {
			return nil, errors.New("mariadb recipe: timeout=ttl needs a positive lease TTL (or set timeout=none)")
		}
		l.idle = time.Duration(cfg.TTL)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

// LockName is the named lock of a key.
func LockName(key string) string { return "splitbrain/" + key }

// WaitTimeout is the session wait_timeout for a lease of ttl: whole
// seconds, rounded up, at least 1.
func WaitTimeout(ttl time.Duration) string {
	return strconv.FormatInt(max(1, int64((ttl+time.Second-1)/time.Second)), 10)
}

// lockTimeout is how long GET_LOCK may wait before the server answers 0
// itself: a little less than ctx allows, so that a busy lock is told
// apart from a server that does not answer.
func lockTimeout(ctx context.Context) string {
	d, ok := ctx.Deadline()
	if !ok {
		return "0"
	}
	left := time.Until(d) - 150*time.Millisecond
	return strconv.FormatFloat(max(0, left.Seconds()), 'f', 3, 64)
}

// session opens the grant's session, its wait_timeout set as it starts.
func (l *Locker) session(ctx context.Context) (*sql.DB, *sql.Conn, error) {
	params := map[string]string{}
	if l.idle > 0 {
		params["wait_timeout"] = WaitTimeout(l.idle)
	}
	connector, err := mysql.NewConnector(ConnConfig(l.endpoint, params))
	if err != nil {
		return nil, nil, fmt.Errorf("mariadb recipe: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, conn, nil
}

// Acquire implements targets.Locker: GET_LOCK in a new session, then the
// token from the fencing counter in the same session.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	db, conn, err := l.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
	}
	s := &lease{key: key, db: db, conn: conn}
	if err := s.take(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	return s, nil
}

// Close implements targets.Locker; every lease has closed its own session
// on release.
func (l *Locker) Close() error { return nil }

type lease struct {
	key   string
	db    *sql.DB
	conn  *sql.Conn
	token uint64
}

// take takes the lock in the lease's session and then its token.
func (s *lease) take(ctx context.Context) error {
	unavailable := func(err error) error { return fmt.Errorf("%w: %w", targets.ErrUnavailable, err) }
	var got sql.NullInt64
	if err := s.conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", LockName(s.key), lockTimeout(ctx)).Scan(&got); err != nil {
		return unavailable(err)
	}
	switch {
	case !got.Valid:
		return unavailable(errors.New("GET_LOCK answered NULL"))
	case got.Int64 != 1:
		return fmt.Errorf("%w: GET_LOCK timed out", targets.ErrBusy)
	}
	// The token, taken while the lock is held, in the same session.
	var tok int64
	if _, err := s.conn.ExecContext(ctx, TakeToken); err != nil {
		return unavailable(err)
	}
	if err := s.conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&tok); err != nil {
		return unavailable(err)
	}
	s.token = uint64(tok)
	return nil
}

func (s *lease) Token() uint64 { return s.token }

func (s *lease) close() {
	_ = s.conn.Close()
	_ = s.db.Close()
}

// Release runs RELEASE_LOCK and closes the session. A session the server
// has ended (wait_timeout, a restart) has lost its lock: ErrNotOwner; so
// has one whose RELEASE_LOCK answers 0 (another session holds it) or NULL
// (nobody does).
func (s *lease) Release(ctx context.Context) error {
	defer s.close()
	var r sql.NullInt64
	err := s.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", LockName(s.key)).Scan(&r)
	switch {
	case err == nil && r.Valid && r.Int64 == 1:
		return nil
	case err == nil:
		return fmt.Errorf("release %s: %w (RELEASE_LOCK answered %v)", s.key, targets.ErrNotOwner, r)
	case sessionGone(err) && ctx.Err() == nil:
		return fmt.Errorf("release %s: %w: the server ended the session: %w", s.key, targets.ErrNotOwner, err)
	default:
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
}

// sessionGone says err shows the server closed the session (an error
// packet, or the connection found closed), not a server that does not
// answer.
func sessionGone(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
