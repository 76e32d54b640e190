package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/splitbrain/splitbrain/internal/pgserver"
	"github.com/splitbrain/splitbrain/targets"
)

// Sequence is the sequence fencing tokens are drawn from.
const Sequence = "splitbrain_fence"

// Lock modes (recipe option lock).
const (
	ModeSession = "session"
	ModeXact    = "xact"
	ModeTry     = "try"
)

// Locker takes advisory locks for one client. Each grant has a connection
// (a session) of its own, opened by Acquire and closed by Release: a
// session lock lives exactly as long as that connection.
type Locker struct {
	endpoint string
	client   string
	mode     string
	// idle is the session's idle timeout (0: the server's default).
	idle  time.Duration
	retry time.Duration
	log   *slog.Logger

	seqOnce sync.Once
	seqErr  error
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("postgres recipe: no endpoint")
	}
	l := &Locker{endpoint: cfg.Endpoints[0], client: client, mode: LockMode.Get(cfg.Options), retry: 20 * time.Millisecond, log: log}
	if Timeout.Get(cfg.Options) == TimeoutTTL {
		if cfg.TTL <= 0 {
			return nil, errors.New("postgres recipe: timeout=ttl needs a positive lease TTL (or set timeout=none)")
		}
		l.idle = time.Duration(cfg.TTL)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

// LockID is the advisory lock's 64-bit key for a lock name: FNV-1a of the
// name.
func LockID(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("splitbrain/" + key))
	return int64(h.Sum64())
}

// connect opens the grant's session: the idle timeout of its mode set at
// connection start, so that it holds from the first statement on.
func (l *Locker) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(pgserver.ConnString(l.endpoint, l.client))
	if err != nil {
		return nil, fmt.Errorf("postgres recipe: %w", err)
	}
	cfg.ConnectTimeout = 2 * time.Second
	if l.idle > 0 {
		ms := strconv.FormatInt(max(1, l.idle.Milliseconds()), 10)
		if l.mode == ModeXact {
			cfg.RuntimeParams["idle_in_transaction_session_timeout"] = ms
		} else {
			cfg.RuntimeParams["idle_session_timeout"] = ms
		}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// ensureSequence creates the token sequence once per Locker; clients
// creating it at once may collide on the catalog's unique index, which
// means it exists.
func (l *Locker) ensureSequence(ctx context.Context, conn *pgx.Conn) error {
	l.seqOnce.Do(func() {
		_, err := conn.Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS "+Sequence)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") {
			err = nil
		}
		l.seqErr = err
	})
	if l.seqErr != nil {
		err := l.seqErr
		l.seqOnce = sync.Once{} // try again next time
		return err
	}
	return nil
}

// lockTimeout is how long the server may let a blocking lock wait before it
// answers "not available" itself: a little less than ctx allows, so that
// a busy lock is told apart from a server that does not answer.
func lockTimeout(ctx context.Context) string {
	d, ok := ctx.Deadline()
	if !ok {
		return "0"
	}
	left := time.Until(d) - 100*time.Millisecond
	return strconv.FormatInt(max(1, left.Milliseconds()), 10)
}

// isLockNotAvailable reports SQLSTATE 55P03 (lock_timeout ran out).
func isLockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// Acquire implements targets.Locker.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
	}
	s := &lease{l: l, key: key, id: LockID(key), conn: conn}
	if err := s.take(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	return s, nil
}

// Close implements targets.Locker; every lease has closed its own
// connection on release.
func (l *Locker) Close() error { return nil }

type lease struct {
	l     *Locker
	key   string
	id    int64
	conn  *pgx.Conn
	tx    pgx.Tx
	token uint64
}

// take takes the lock in the lease's session and then its token.
func (s *lease) take(ctx context.Context) error {
	unavailable := func(err error) error { return fmt.Errorf("%w: %w", targets.ErrUnavailable, err) }
	if err := s.l.ensureSequence(ctx, s.conn); err != nil {
		return unavailable(err)
	}
	var q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		QueryRow(context.Context, string, ...any) pgx.Row
	} = s.conn
	switch s.l.mode {
	case ModeTry:
		for {
			var ok bool
			if err := s.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", s.id).Scan(&ok); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%w: %w", targets.ErrBusy, ctx.Err())
				}
				return unavailable(err)
			}
			if ok {
				break
			}
			jitter := time.Duration(rand.Int64N(int64(s.l.retry)))
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", targets.ErrBusy, ctx.Err())
			case <-time.After(s.l.retry + jitter):
			}
		}
	case ModeSession, ModeXact:
		sql := "SELECT pg_advisory_lock($1)"
		if s.l.mode == ModeXact {
			tx, err := s.conn.Begin(ctx)
			if err != nil {
				return unavailable(err)
			}
			s.tx, q = tx, tx
			sql = "SELECT pg_advisory_xact_lock($1)"
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", lockTimeout(ctx)); err != nil {
				return unavailable(err)
			}
		} else if _, err := s.conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, false)", lockTimeout(ctx)); err != nil {
			return unavailable(err)
		}
		if _, err := q.Exec(ctx, sql, s.id); err != nil {
			if isLockNotAvailable(err) {
				return fmt.Errorf("%w: %w", targets.ErrBusy, err)
			}
			return unavailable(err)
		}
	}
	// The token, taken while the lock is held, in the same session (in
	// the lock's transaction for xact: nextval is never rolled back).
	var tok int64
	if err := q.QueryRow(ctx, "SELECT nextval('"+Sequence+"')").Scan(&tok); err != nil {
		return unavailable(err)
	}
	s.token = uint64(tok)
	return nil
}

func (s *lease) Token() uint64 { return s.token }

// Release unlocks (session, try) or commits the lock's transaction (xact),
// then closes the session. A session the server has ended (idle timeout,
// restart) has lost its lock: ErrNotOwner.
func (s *lease) Release(ctx context.Context) error {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.conn.Close(cctx)
	}()
	var err error
	held := true
	if s.tx != nil {
		err = s.tx.Commit(ctx)
	} else {
		err = s.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", s.id).Scan(&held)
	}
	var pe *pgconn.PgError
	switch {
	case err == nil && held:
		return nil
	case err == nil, errors.As(err, &pe), s.conn.IsClosed() && ctx.Err() == nil:
		// The server said no, or ended the session (and its locks).
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrNotOwner, errors.Join(err, errors.New("lock not held")))
	default:
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
}
