package external

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// serveMargin is kept between a request's deadline_ms and the moment a
// served recipe gives up: time to write the answer.
const serveMargin = 50 * time.Millisecond

// Serve is the adapter side of the client protocol for a recipe written in
// Go: it reads requests from in and writes replies to out, driving r's
// Locker, until close, end of input or ctx. It lets a shipped recipe go
// through the same conformance steps as an adapter a user brings
// (`splitbrain client-check --recipe KIND`), and makes any recipe usable
// from a program that speaks the protocol.
func Serve(ctx context.Context, r targets.Recipe, in io.Reader, out io.Writer, log *slog.Logger) error {
	if r.New == nil {
		return fmt.Errorf("recipe %s is an adapter process already (%s), not a Go library", r.Kind, r.Adapter)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{r: r, out: out, log: log, leases: map[string]targets.Lease{}}
	defer s.close()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var wg sync.WaitGroup
	defer wg.Wait()
	for sc.Scan() {
		var req Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.ID <= 0 {
			log.Warn("not a request", "line", sc.Text(), "err", err)
			continue
		}
		switch req.Type {
		case TypeHello:
			// The handshake is answered before any other request is read.
			s.write(s.hello(ctx, req))
		case TypeClose:
			cancel()
			wg.Wait()
			s.write(Reply{ID: req.ID, Type: TypeClosed})
			return nil
		case TypeAcquire, TypeRelease:
			// Requests on different keys run side by side; the agent sends
			// one request per key at a time.
			wg.Go(func() { s.write(s.handle(ctx, req)) })
		default:
			s.write(Reply{ID: req.ID, Type: TypeError, Message: "unsupported"})
		}
	}
	return sc.Err()
}

// server is one life of a served recipe.
type server struct {
	r   targets.Recipe
	out io.Writer
	log *slog.Logger

	wmu sync.Mutex // one reply line at a time

	mu     sync.Mutex
	locker targets.Locker
	leases map[string]targets.Lease
	next   int
}

func (s *server) write(rep Reply) {
	b, err := json.Marshal(rep)
	if err != nil {
		s.log.Error("reply", "err", err)
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.out.Write(append(b, '\n')); err != nil {
		s.log.Warn("write reply", "err", err)
	}
}

// hello checks the options against the recipe's declarations and makes
// its Locker.
func (s *server) hello(ctx context.Context, req Request) Reply {
	fail := func(format string, args ...any) Reply {
		return Reply{ID: req.ID, Type: TypeError, Message: fmt.Sprintf(format, args...)}
	}
	if req.Protocol != Version {
		return fail("protocol %d: this adapter speaks protocol %d", req.Protocol, Version)
	}
	if req.Backend != "" && !s.r.Serves(req.Backend) {
		return fail("recipe %s does not serve backend %s (it serves %v)", s.r.Kind, req.Backend, s.r.Backends)
	}
	cfg := targets.RecipeConfig{Kind: s.r.Kind, Backend: req.Backend, Endpoints: req.Endpoints,
		TTL: targets.Duration(time.Duration(req.TTLMillis) * time.Millisecond), Options: option.Set(req.Options)}
	// The factory refuses an option the recipe does not declare.
	l, err := s.r.Factory()(ctx, cfg, req.Client, s.log)
	if err != nil {
		return fail("%s: %v", s.r.Kind, err)
	}
	s.mu.Lock()
	if s.locker != nil {
		s.locker.Close()
	}
	s.locker = l
	s.mu.Unlock()
	mode := RenewNone
	if s.r.Renews {
		mode = RenewWatchdog
	}
	lib, version := s.r.Library, s.r.Version
	if lib == "" {
		lib, version = "splitbrain "+s.r.Kind, "built in"
	}
	return Reply{ID: req.ID, Type: TypeHelloOK, Protocol: Version, Library: lib, Version: version, Language: "go",
		Offers: &Offers{Token: s.r.Fencing, Renew: s.r.Renews, RenewMode: mode, CheckedRelease: s.r.CheckedRelease, Session: s.r.Session}}
}

// handle answers an acquire or a release within its deadline.
func (s *server) handle(ctx context.Context, req Request) Reply {
	s.mu.Lock()
	l := s.locker
	s.mu.Unlock()
	if l == nil {
		return Reply{ID: req.ID, Type: TypeError, Message: "no hello yet"}
	}
	d := time.Duration(req.DeadlineMillis)*time.Millisecond - serveMargin
	if d <= 0 {
		d = time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if req.Type == TypeAcquire {
		lease, err := l.Acquire(ctx, req.Key)
		if err != nil {
			return errorReply(req.ID, err)
		}
		s.mu.Lock()
		s.next++
		id := strconv.Itoa(s.next)
		s.leases[id] = lease
		s.mu.Unlock()
		rep := Reply{ID: req.ID, Type: TypeGranted, Lease: id}
		if s.r.Fencing {
			t := lease.Token()
			rep.Token = &t
		}
		return rep
	}
	s.mu.Lock()
	lease, ok := s.leases[req.Lease]
	delete(s.leases, req.Lease)
	s.mu.Unlock()
	if !ok {
		return Reply{ID: req.ID, Type: TypeError, Message: "unknown lease " + strconv.Quote(req.Lease)}
	}
	if err := lease.Release(ctx); err != nil {
		return errorReply(req.ID, err)
	}
	return Reply{ID: req.ID, Type: TypeOK}
}

// errorReply is the protocol's word for a Locker's error, as an agent
// running the recipe in process would record it: busy, not_owner, else
// unavailable.
func errorReply(id int64, err error) Reply {
	switch {
	case errors.Is(err, targets.ErrBusy):
		return Reply{ID: id, Type: TypeBusy}
	case errors.Is(err, targets.ErrNotOwner):
		return Reply{ID: id, Type: TypeNotOwner}
	}
	return Reply{ID: id, Type: TypeUnavailable, Message: err.Error()}
}

func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locker != nil {
		s.locker.Close()
	}
}
