package external

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
)

// Defaults of a [Config].
const (
	// DefaultGrace is kept between a request's deadline_ms and the agent's
	// own deadline: time for the reply to reach the agent.
	DefaultGrace = 200 * time.Millisecond
	// DefaultHelloTimeout bounds an adapter's start and handshake (a JVM
	// takes a few seconds to start).
	DefaultHelloTimeout = 20 * time.Second
	// DefaultDeadline bounds a request whose context has no deadline.
	DefaultDeadline = 10 * time.Second
)

// Back-off between restarts of an adapter that died: it doubles from
// restartMin up to restartMax, and starts again from restartMin once an
// adapter lived longer than restartReset.
const (
	restartMin   = 100 * time.Millisecond
	restartMax   = 5 * time.Second
	restartReset = 10 * time.Second
)

// Errors of an adapter process, each wrapped in a [targets.KindError]
// naming its history kind.
var (
	// ErrTimeout: the adapter did not answer within the deadline.
	ErrTimeout = errors.New("lock client adapter did not answer in time")
	// ErrProtocol: the adapter broke the client protocol.
	ErrProtocol = errors.New("lock client adapter broke the protocol")
	// ErrCrashed: the adapter process died (or could not be started).
	ErrCrashed = errors.New("lock client adapter died")
	// ErrAdapter: the adapter answered with an error of its own.
	ErrAdapter = errors.New("lock client adapter reported an error")
)

func kindErr(kind string, sentinel error, format string, args ...any) error {
	return &targets.KindError{Kind: kind, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// Config says how to run one adapter.
type Config struct {
	// Command is the adapter's command line, run with sh -c.
	Command string
	// Dir is its working directory; empty means the agent's.
	Dir string
	// Env are KEY=VALUE pairs added to the agent's environment for it.
	Env []string
	// Client, Backend, Endpoints, TTL and Options are sent in hello.
	Client    string
	Backend   string
	Endpoints []string
	TTL       time.Duration
	Options   map[string]string
	// Recipe is the recipe's kind, as Describe reports it (empty:
	// "external").
	Recipe string
	// Grace is kept between a request's deadline_ms and the agent's own
	// deadline (0: DefaultGrace).
	Grace time.Duration
	// HelloTimeout bounds starting the adapter and its handshake (0:
	// DefaultHelloTimeout).
	HelloTimeout time.Duration
	// Log receives the adapter's stderr, a record per line, and the
	// runner's warnings (late replies, restarts).
	Log *slog.Logger

	// onLine, when set, sees every line of the adapter's stdout: the
	// reply read from it and its unknown fields, or why it is not one
	// (the conformance check listens).
	onLine func(rep Reply, unknown []string, err error)
}

// Locker drives one adapter process as a [targets.Locker]. It starts the
// process, says hello, and sends each lock request with a deadline; when
// the process dies it starts it again (with back-off) at the next
// request. A Locker is safe for concurrent use.
type Locker struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	proc      *proc
	hello     Reply
	lastStart time.Time
	backoff   time.Duration
	lives     int
	closed    bool
}

var (
	_ targets.Locker    = (*Locker)(nil)
	_ targets.Describer = (*Locker)(nil)
)

// Start starts the adapter and runs the handshake. An adapter that answers
// hello with an error (bad endpoints, an unknown option) fails Start with
// its message.
func Start(ctx context.Context, cfg Config) (*Locker, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, errors.New("external client: no adapter command")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l := &Locker{cfg: cfg, log: cfg.Log.With("adapter", cfg.Command), backoff: restartMin}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.startLocked(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Factory is a targets.LockerFactory running command as the adapter, in
// dir: how a recipe whose library is not Go registers itself. An empty
// command takes the RecipeConfig's Command (a client the user brought).
func Factory(kind, command, dir string) targets.LockerFactory {
	return func(ctx context.Context, rc targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
		cmd := command
		if cmd == "" {
			cmd = rc.Command
		}
		if _, err := os.Stat(dir); err != nil {
			dir = "" // no files were shipped: the agent's directory
		}
		return Start(ctx, Config{
			Command: cmd, Dir: dir, Client: client, Backend: rc.BackendName(), Endpoints: rc.Endpoints,
			TTL: time.Duration(rc.TTL), Options: rc.Options, Recipe: kind, Log: log,
		})
	}
}

// Hello returns the adapter's last hello_ok.
func (l *Locker) Hello() Reply {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hello
}

// Describe implements targets.Describer from the adapter's hello_ok.
func (l *Locker) Describe() targets.ClientInfo {
	h := l.Hello()
	kind := l.cfg.Recipe
	if kind == "" {
		kind = "external"
	}
	info := targets.ClientInfo{Recipe: kind, Library: h.Library, Version: h.Version, Language: h.Language, Command: l.cfg.Command}
	if h.Offers != nil {
		info.Fencing, info.CheckedRelease, info.Renews, info.Session = h.Offers.Token, h.Offers.CheckedRelease, h.Offers.Renew, h.Offers.Session
	}
	return info
}

// Lives is how many times the adapter was started.
func (l *Locker) Lives() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lives
}

// current returns the live adapter, starting it again (after the back-off,
// bounded by ctx) when the last one died.
func (l *Locker) current(ctx context.Context) (*proc, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("external client: closed")
	}
	if l.proc != nil && !l.proc.isDead() {
		return l.proc, nil
	}
	if l.proc != nil {
		if time.Since(l.lastStart) > restartReset {
			l.backoff = restartMin
		}
		wait := time.Until(l.lastStart.Add(l.backoff))
		l.backoff = min(2*l.backoff, restartMax)
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil, kindErr(history.ErrClientCrashed, ErrCrashed, "adapter died (%v) and its restart is backing off", l.proc.deathErr)
			case <-time.After(wait):
			}
		}
		l.log.Warn("restarting the lock client adapter", "died", l.proc.deathErr, "lives", l.lives)
	}
	return l.startLocked(ctx)
}

// startLocked starts a new life of the adapter and says hello; l.mu is
// held.
func (l *Locker) startLocked(ctx context.Context) (*proc, error) {
	l.lastStart = time.Now()
	l.lives++
	p, err := startProc(l.cfg, l.log)
	if err != nil {
		return nil, kindErr(history.ErrClientCrashed, ErrCrashed, "start %q: %v", l.cfg.Command, err)
	}
	hctx, cancel := context.WithTimeout(ctx, l.cfg.HelloTimeout)
	defer cancel()
	rep, err := p.call(hctx, Request{
		Type: TypeHello, Protocol: Version, Client: l.cfg.Client, Backend: l.cfg.Backend,
		Endpoints: l.cfg.Endpoints, TTLMillis: l.cfg.TTL.Milliseconds(), Options: l.cfg.Options,
	})
	if err == nil && rep.Type == TypeError {
		err = fmt.Errorf("adapter %q refused to start: %s", l.cfg.Command, rep.Message)
	}
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("hello: %w", err)
	}
	p.setOffers(*rep.Offers)
	l.proc, l.hello = p, rep
	return p, nil
}

// Acquire implements targets.Locker: busy, unavailable and not_owner map
// onto targets.ErrBusy, ErrUnavailable and ErrNotOwner; a late, garbled or
// missing answer onto a KindError of its history kind.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	p, err := l.current(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	rep, err := p.call(ctx, Request{Type: TypeAcquire, Key: key, TTLMillis: l.cfg.TTL.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	switch rep.Type {
	case TypeGranted:
		s := &Lease{p: p, key: key, lease: rep.Lease}
		if rep.Token != nil {
			s.token = *rep.Token
		}
		return s, nil
	case TypeBusy:
		return nil, fmt.Errorf("acquire %s: %w", key, targets.ErrBusy)
	case TypeUnavailable:
		return nil, fmt.Errorf("acquire %s: %w: %s", key, targets.ErrUnavailable, rep.Message)
	default:
		return nil, fmt.Errorf("acquire %s: %w", key, kindErr(history.ErrClientError, ErrAdapter, "%s", rep.Message))
	}
}

// Close implements targets.Locker: it sends close, then closes the
// adapter's stdin, and kills its process group if it has not exited within
// two seconds.
func (l *Locker) Close() error {
	l.mu.Lock()
	p := l.proc
	l.closed = true
	l.mu.Unlock()
	if p == nil || p.isDead() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := p.call(ctx, Request{Type: TypeClose})
	p.closeStdin()
	select {
	case <-p.dead:
	case <-time.After(2 * time.Second):
		p.kill()
		<-p.dead
	}
	if err != nil {
		return fmt.Errorf("close adapter: %w", err)
	}
	return nil
}

// Lease is a lock granted by an adapter.
type Lease struct {
	p     *proc
	key   string
	lease string
	token uint64
}

var _ targets.Lease = (*Lease)(nil)

// Token implements targets.Lease: the adapter's token, 0 when it offers
// none.
func (s *Lease) Token() uint64 { return s.token }

// ID is the adapter's opaque lease string.
func (s *Lease) ID() string { return s.lease }

// orphaned is the error of a request for a lease whose adapter died.
func (s *Lease) orphaned() error {
	return kindErr(history.ErrClientCrashed, ErrCrashed, "the adapter that was granted %s died (%v); its lock is left to expire", s.key, s.p.deathErr)
}

// Release implements targets.Lease.
func (s *Lease) Release(ctx context.Context) error {
	if s.p.isDead() {
		return fmt.Errorf("release %s: %w", s.key, s.orphaned())
	}
	rep, err := s.p.call(ctx, Request{Type: TypeRelease, Key: s.key, Lease: s.lease})
	if err != nil {
		return fmt.Errorf("release %s: %w", s.key, err)
	}
	return outcome("release "+s.key, rep)
}

// Renew asks the adapter to renew the lease for ttl; errors.ErrUnsupported
// when its hello did not offer renewal on request.
func (s *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if o := s.p.getOffers(); !o.Renew || o.RenewMode != RenewRequest {
		return errors.ErrUnsupported
	}
	if s.p.isDead() {
		return fmt.Errorf("renew %s: %w", s.key, s.orphaned())
	}
	rep, err := s.p.call(ctx, Request{Type: TypeRenew, Key: s.key, Lease: s.lease, TTLMillis: ttl.Milliseconds()})
	if err != nil {
		return fmt.Errorf("renew %s: %w", s.key, err)
	}
	return outcome("renew "+s.key, rep)
}

// Held asks the adapter whether the lease is still its own;
// errors.ErrUnsupported when its hello did not offer it.
func (s *Lease) Held(ctx context.Context) (bool, error) {
	if !s.p.getOffers().Held {
		return false, errors.ErrUnsupported
	}
	if s.p.isDead() {
		return false, fmt.Errorf("held %s: %w", s.key, s.orphaned())
	}
	rep, err := s.p.call(ctx, Request{Type: TypeHeld, Key: s.key, Lease: s.lease})
	if err != nil {
		return false, fmt.Errorf("held %s: %w", s.key, err)
	}
	if rep.Type == TypeHeld {
		return *rep.Held, nil
	}
	return false, outcome("held "+s.key, rep)
}

// outcome maps a release or renew reply onto the targets errors.
func outcome(what string, rep Reply) error {
	switch rep.Type {
	case TypeOK:
		return nil
	case TypeNotOwner:
		return fmt.Errorf("%s: %w", what, targets.ErrNotOwner)
	case TypeUnavailable:
		return fmt.Errorf("%s: %w: %s", what, targets.ErrUnavailable, rep.Message)
	default:
		return fmt.Errorf("%s: %w", what, kindErr(history.ErrClientError, ErrAdapter, "%s", rep.Message))
	}
}

// proc is one life of the adapter process.
type proc struct {
	cfg Config
	log *slog.Logger
	cmd *exec.Cmd

	wmu   sync.Mutex
	stdin io.WriteCloser

	mu        sync.Mutex
	nextID    int64
	pending   map[int64]*call
	abandoned map[int64]Request // requests given up on: their replies are late
	// keys are the keys with a request in flight (pending, or abandoned
	// and not yet answered): the protocol sends at most one request per
	// key at a time, so the next one waits for the answer.
	keys   map[string]*keySlot
	offers Offers
	tail   []string // the last lines of stderr

	dead     chan struct{}
	deathErr error // set before dead is closed
}

type call struct {
	req Request
	ch  chan result // buffered: one result
}

// keySlot is a key's request in flight; free is closed when it is
// answered (or the process dies).
type keySlot struct {
	id   int64
	typ  string
	sent time.Time
	free chan struct{}
}

type result struct {
	rep Reply
	err error
}

// stderrLines is how many of the adapter's last stderr lines a crash
// report quotes.
const stderrLines = 3

func startProc(cfg Config, log *slog.Logger) (*proc, error) {
	cmd := exec.Command("sh", "-c", cfg.Command)
	cmd.Dir = cfg.Dir
	// Python buffers a piped stdout: replies would sit in the buffer.
	cmd.Env = append(append(os.Environ(), "PYTHONUNBUFFERED=1"), cfg.Env...)
	cmd.SysProcAttr = sysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cfg: cfg, log: log.With("pid", cmd.Process.Pid), cmd: cmd, stdin: stdin,
		pending: map[int64]*call{}, abandoned: map[int64]Request{}, keys: map[string]*keySlot{}, dead: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.readStderr(stderr) }()
	go func() { defer wg.Done(); p.readStdout(stdout) }()
	go func() {
		wg.Wait()
		werr := cmd.Wait()
		p.die(werr)
	}()
	return p, nil
}

func (p *proc) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

func (p *proc) setOffers(o Offers) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.offers = o
}

func (p *proc) getOffers() Offers {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offers
}

// kill ends the adapter's whole process group.
func (p *proc) kill() {
	killGroup(p.cmd.Process.Pid)
	p.closeStdin()
}

func (p *proc) closeStdin() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.stdin.Close()
}

func (p *proc) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.log.Info("adapter: " + line)
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > stderrLines {
			p.tail = p.tail[len(p.tail)-stderrLines:]
		}
		p.mu.Unlock()
	}
}

func (p *proc) readStdout(r io.Reader) {
	lr := newLineReader(r)
	for lr.next() {
		rep, unknown, err := Reply{}, []string(nil), lr.err
		if err == nil {
			rep, unknown, err = ParseReply(lr.line)
		}
		if p.cfg.onLine != nil {
			p.cfg.onLine(rep, unknown, err)
		}
		if err != nil {
			p.garbage(fmt.Sprintf("it wrote %v", err))
			continue
		}
		p.mu.Lock()
		c := p.pending[rep.ID]
		delete(p.pending, rep.ID)
		req, late := p.abandoned[rep.ID]
		delete(p.abandoned, rep.ID)
		offers := p.offers
		p.mu.Unlock()
		switch {
		case c != nil:
			o := &offers
			if c.req.Type == TypeHello {
				o = nil
			}
			if err := CheckReply(c.req, rep, o); err != nil {
				c.ch <- result{err: kindErr(history.ErrClientProtocol, ErrProtocol, "%v", err)}
				if !p.giveBack(c.req, rep) {
					p.freeKey(c.req)
				}
				continue
			}
			p.freeKey(c.req)
			c.ch <- result{rep: rep}
		case late:
			p.log.Warn("late reply from the lock client adapter discarded", "request", req.Type, "id", rep.ID, "reply", rep.Type)
			if !p.giveBack(req, rep) {
				p.freeKey(req)
			}
		default:
			p.garbage(fmt.Sprintf("it answered request %d, which it was never sent or has already answered", rep.ID))
		}
	}
}

// giveBack releases a lock granted in a reply the agent could not use (a
// late or malformed grant), so that it holds nobody up until it expires.
// The release takes over the key's slot from the acquire (the next
// request for the key waits for the release's answer too); it reports
// whether it did.
func (p *proc) giveBack(req Request, rep Reply) bool {
	if req.Type != TypeAcquire || rep.Type != TypeGranted || rep.Lease == "" {
		return false
	}
	p.mu.Lock()
	slot := p.keys[req.Key]
	p.mu.Unlock()
	if slot == nil || slot.id != req.ID {
		return false
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := p.send(ctx, Request{Type: TypeRelease, Key: req.Key, Lease: rep.Lease}, slot)
		p.log.Info("released a grant the agent could not use", "key", req.Key, "err", err)
	}()
	return true
}

// takeKey waits until key has no request in flight and claims it for a
// new request, or fails when ctx ends first: then the request is not
// sent, and when the one in flight is a late one (its own deadline
// passed), the adapter is killed, to be started again at the next
// request — an adapter that does not answer at all would otherwise keep
// the key forever.
func (p *proc) takeKey(ctx context.Context, req Request) (*keySlot, error) {
	for {
		p.mu.Lock()
		if p.isDead() {
			p.mu.Unlock()
			return nil, kindErr(history.ErrClientCrashed, ErrCrashed, "adapter %v", p.deathErr)
		}
		s := p.keys[req.Key]
		if s == nil {
			s = &keySlot{free: make(chan struct{})}
			p.keys[req.Key] = s
			p.mu.Unlock()
			return s, nil
		}
		_, late := p.abandoned[s.id]
		p.mu.Unlock()
		select {
		case <-s.free:
			continue
		case <-p.dead:
			continue
		case <-ctx.Done():
			what := "still working on"
			if late {
				what = "not answered"
				p.log.Warn("the lock client adapter has not answered a request past its deadline: restarting it",
					"request", s.typ, "id", s.id, "key", req.Key, "sent", time.Since(s.sent).Round(time.Millisecond))
				p.kill()
				select { // so that the next request starts a new life
				case <-p.dead:
				case <-time.After(2 * time.Second):
				}
			}
			return nil, kindErr(history.ErrClientTimeout, ErrTimeout, "%s not sent: the adapter had %s %s %d%s (sent %v before), and the protocol allows one request per key at a time",
				req.Type, what, s.typ, s.id, keyText(req.Key), time.Since(s.sent).Round(time.Millisecond))
		}
	}
}

// freeKey ends req's hold on its key's slot.
func (p *proc) freeKey(req Request) {
	if req.Key == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.keys[req.Key]; s != nil && s.id == req.ID {
		delete(p.keys, req.Key)
		close(s.free)
	}
}

// garbage fails every request in flight with a protocol error: once the
// adapter's output cannot be read, none of its answers can be trusted to
// be the ones awaited. Their replies, if any come, are treated as late.
func (p *proc) garbage(what string) {
	p.log.Warn("lock client adapter broke the protocol", "what", what)
	p.mu.Lock()
	calls := p.pending
	p.pending = map[int64]*call{}
	for id, c := range calls {
		p.abandoned[id] = c.req
	}
	p.mu.Unlock()
	for _, c := range calls {
		c.ch <- result{err: kindErr(history.ErrClientProtocol, ErrProtocol, "while %s %d was pending %s", c.req.Type, c.req.ID, what)}
	}
}

// die records how the process ended and fails every request in flight.
func (p *proc) die(werr error) {
	p.mu.Lock()
	status := "exited"
	if werr != nil {
		status = werr.Error()
	}
	if len(p.tail) > 0 {
		status += "; its last words on stderr: " + strings.Join(p.tail, " | ")
	}
	p.deathErr = errors.New(status)
	calls := p.pending
	p.pending = map[int64]*call{}
	for k, s := range p.keys {
		delete(p.keys, k)
		close(s.free)
	}
	p.mu.Unlock()
	close(p.dead)
	for _, c := range calls {
		c.ch <- result{err: kindErr(history.ErrClientCrashed, ErrCrashed, "adapter %s during %s %d", status, c.req.Type, c.req.ID)}
	}
}

// call sends req (with a fresh id and, but for hello, deadline_ms from
// ctx's deadline less the grace) and waits for its reply, the process's
// death or ctx's end. A request for a key first waits for the key's
// request in flight to be answered (takeKey).
func (p *proc) call(ctx context.Context, req Request) (Reply, error) {
	return p.send(ctx, req, nil)
}

// send is call; slot, when not nil, is the key's slot the request takes
// over (a release of a late grant) instead of waiting for it.
func (p *proc) send(ctx context.Context, req Request, slot *keySlot) (Reply, error) {
	if req.Type != TypeHello && ctx.Err() == nil {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, DefaultDeadline)
			defer cancel()
		}
	}
	if req.Key != "" && slot == nil {
		var err error
		if slot, err = p.takeKey(ctx, req); err != nil {
			return Reply{}, err
		}
	}
	if req.Type != TypeHello {
		budget := DefaultDeadline
		if dl, ok := ctx.Deadline(); ok {
			budget = time.Until(dl)
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, budget)
			defer cancel()
		}
		grace := min(p.cfg.Grace, budget/4)
		req.DeadlineMillis = max(1, (budget - grace).Milliseconds())
	}
	c := &call{ch: make(chan result, 1)}
	p.mu.Lock()
	if p.isDead() {
		p.mu.Unlock()
		return Reply{}, kindErr(history.ErrClientCrashed, ErrCrashed, "adapter %v", p.deathErr)
	}
	p.nextID++
	req.ID = p.nextID
	c.req = req
	p.pending[req.ID] = c
	if slot != nil {
		slot.id, slot.typ, slot.sent = req.ID, req.Type, time.Now()
		p.keys[req.Key] = slot
	}
	p.mu.Unlock()

	line, err := json.Marshal(req)
	if err != nil {
		return Reply{}, fmt.Errorf("encode %s: %w", req.Type, err)
	}
	p.wmu.Lock()
	_, werr := p.stdin.Write(append(line, '\n'))
	p.wmu.Unlock()
	if werr != nil {
		select {
		case <-p.dead:
		case <-time.After(time.Second):
		}
		p.forget(req.ID)
		p.freeKey(req)
		return Reply{}, kindErr(history.ErrClientCrashed, ErrCrashed, "write %s to the adapter: %v (%v)", req.Type, werr, p.deathErr)
	}
	start := time.Now()
	select {
	case r := <-c.ch:
		return r.rep, r.err
	case <-ctx.Done():
		p.mu.Lock()
		if _, still := p.pending[req.ID]; still {
			delete(p.pending, req.ID)
			p.abandoned[req.ID] = req
			p.mu.Unlock()
			return Reply{}, kindErr(history.ErrClientTimeout, ErrTimeout, "no answer to %s %d%s within %v (deadline_ms %d)",
				req.Type, req.ID, keyText(req.Key), time.Since(start).Round(time.Millisecond), req.DeadlineMillis)
		}
		p.mu.Unlock()
		r := <-c.ch // answered (or failed) just now
		return r.rep, r.err
	}
}

func (p *proc) forget(id int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, id)
}

func keyText(key string) string {
	if key == "" {
		return ""
	}
	return " for " + key
}

// killGroup sends SIGKILL to the process group led by pid (the adapter is
// started as a group leader, so its children go with it).
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
