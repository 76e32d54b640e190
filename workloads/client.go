package workloads

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// Errors of the control channel.
var (
	// ErrCrashed: the agent's output ended (it died or was killed).
	ErrCrashed = errors.New("client agent crashed")
	// ErrTimeout: the agent did not finish an operation in time.
	ErrTimeout = errors.New("client agent timed out")
)

// Client is the harness's end of one agent's control channel.
//
// Do and Sync must not be called concurrently; Events may be read from
// other goroutines through the callback. Reconnect may be called from any
// goroutine, after the agent's node was restarted.
type Client struct {
	// Name is the agent's node name ("c3").
	Name string
	// Process is the client's index in the history.
	Process int

	clock history.Clock

	mu      sync.Mutex
	conn    *conn
	revived chan struct{} // closed and replaced at each Reconnect
	// sent are the operations sent on conn whose done response has not
	// been read (one, or two when pipelined; still running after a
	// timeout until drained).
	sent []int64
	// ahead counts operations sent while another was running.
	ahead int

	// offset maps agent monotonic time to the run's: run = mono - offset.
	offset int64
	// skew is half the best ping round trip: the uncertainty of offset;
	// zero when exact.
	skew time.Duration
	// exact: the agent reads the clock the run's time base is read from.
	exact bool
	// maxSkew is the largest skew of every Sync (a restarted agent is
	// synced again).
	maxSkew time.Duration

	// info is what the agent's lock client said it is (nil: nothing).
	info *targets.ClientInfo
}

// ClientInfo is what the agent's lock client said of itself when it was
// configured (an adapter's handshake); nil when it said nothing.
func (c *Client) ClientInfo() *targets.ClientInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// conn is one life of the agent: its stdin and the responses read from its
// stdout. When stdout takes read deadlines (a console socket), the goroutine
// waiting for a response reads it (lines); otherwise a goroutine reads
// ahead and hands the responses over (resps).
type conn struct {
	stdin  io.WriteCloser
	lines  *lineReader
	resps  chan agent.Response
	encErr error
}

func newConn(stdin io.WriteCloser, stdout io.Reader) *conn {
	cn := &conn{stdin: stdin}
	if cn.lines = newLineReader(stdout); cn.lines != nil {
		return cn
	}
	cn.resps = make(chan agent.Response, 64)
	go func() {
		defer close(cn.resps)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			var r agent.Response
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // not protocol output
			}
			cn.resps <- r
		}
	}()
	return cn
}

// NewClient wraps an agent's stdio. The reader goroutine ends when stdout
// ends.
func NewClient(name string, process int, stdin io.WriteCloser, stdout io.Reader, clock history.Clock) *Client {
	return &Client{Name: name, Process: process, clock: clock, conn: newConn(stdin, stdout), revived: make(chan struct{})}
}

// Reconnect replaces the control channel after the agent's node was
// restarted and runs ready (which configures and syncs the new agent);
// only when ready succeeds are loops waiting on Revived released, so no
// operation races the handshake.
func (c *Client) Reconnect(stdin io.WriteCloser, stdout io.Reader, ready func() error) error {
	c.mu.Lock()
	c.conn = newConn(stdin, stdout)
	c.sent = nil
	c.mu.Unlock()
	if err := ready(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.revived)
	c.revived = make(chan struct{})
	return nil
}

// Revived returns a channel closed at the next Reconnect; take it before an
// operation to wait for a restart after the operation found the agent dead.
func (c *Client) Revived() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revived
}

func (c *Client) current() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

func (c *Client) send(r agent.Request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cn := c.conn
	if cn.encErr != nil {
		return cn.encErr
	}
	if _, err := cn.stdin.Write(append(b, '\n')); err != nil {
		cn.encErr = fmt.Errorf("%s: write request: %w: %w", c.Name, ErrCrashed, err)
		return cn.encErr
	}
	return nil
}

// recv returns the agent's next response, waiting until deadline (zero:
// none) or ctx is done.
func (c *Client) recv(ctx context.Context, deadline time.Time) (agent.Response, error) {
	cn := c.current()
	if cn.lines != nil {
		for {
			line, err := cn.lines.next(ctx, deadline)
			switch {
			case err == nil:
			case errors.Is(err, os.ErrDeadlineExceeded):
				return agent.Response{}, fmt.Errorf("%s: %w: %w", c.Name, ErrTimeout, context.DeadlineExceeded)
			case ctx.Err() != nil:
				return agent.Response{}, fmt.Errorf("%s: %w: %w", c.Name, ErrTimeout, ctx.Err())
			case errors.Is(err, io.EOF):
				return agent.Response{}, fmt.Errorf("%s: %w", c.Name, ErrCrashed)
			default:
				return agent.Response{}, fmt.Errorf("%s: %w: %w", c.Name, ErrCrashed, err)
			}
			var r agent.Response
			if json.Unmarshal(line, &r) == nil {
				return r, nil
			}
			// not protocol output
		}
	}
	expired, stop := expiry(deadline)
	defer stop()
	select {
	case r, ok := <-cn.resps:
		if !ok {
			return agent.Response{}, fmt.Errorf("%s: %w", c.Name, ErrCrashed)
		}
		return r, nil
	case <-ctx.Done():
		return agent.Response{}, fmt.Errorf("%s: %w: %w", c.Name, ErrTimeout, ctx.Err())
	case <-expired:
		return agent.Response{}, fmt.Errorf("%s: %w: %w", c.Name, ErrTimeout, context.DeadlineExceeded)
	}
}

// Configure sends the agent its configuration and waits until it is ready.
func (c *Client) Configure(ctx context.Context, cfg agent.Config) error {
	if err := c.send(agent.Request{Type: agent.ReqConfig, Config: &cfg}); err != nil {
		return err
	}
	for {
		r, err := c.recv(ctx, time.Time{})
		if err != nil {
			return fmt.Errorf("configure %s: %w", c.Name, err)
		}
		switch r.Type {
		case agent.RespReady:
			c.mu.Lock()
			c.info = r.Client
			c.mu.Unlock()
			return nil
		case agent.RespError:
			return fmt.Errorf("configure %s: %s", c.Name, r.Error)
		}
	}
}

// Sync relates the agent's monotonic clock to the run's with a few pings,
// keeping the one with the shortest round trip. When the agent reads the
// very clock the run's time base counts from (same kernel boot and time
// namespace: an agent in a local container), the relation is exact, and
// every ping must agree with it.
func (c *Client) Sync(ctx context.Context) error {
	best := time.Duration(-1)
	base, shared := c.clock.(interface{ Base() int64 })
	local := agent.ClockDomain()
	exact := shared && local != ""
	for seq := int64(1); seq <= 5; seq++ {
		t0 := c.clock.Now()
		if err := c.send(agent.Request{Type: agent.ReqPing, Seq: seq}); err != nil {
			return err
		}
		for {
			r, err := c.recv(ctx, time.Time{})
			if err != nil {
				return fmt.Errorf("sync %s: %w", c.Name, err)
			}
			if r.Type != agent.RespPong || r.Seq != seq {
				continue
			}
			t1 := c.clock.Now()
			if exact && (r.Clock != local || r.Mono-base.Base() < t0 || r.Mono-base.Base() > t1) {
				exact = false
			}
			if rtt := time.Duration(t1 - t0); best < 0 || rtt < best {
				best = rtt
				c.offset = r.Mono - (t0+t1)/2
				c.skew = rtt / 2
			}
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exact = exact; exact {
		c.offset, c.skew = base.Base(), 0
	}
	c.maxSkew = max(c.maxSkew, c.skew)
	return nil
}

// Exact says whether RunTime is exact: the agent's clock is the run's.
func (c *Client) Exact() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exact
}

// RunTime converts an agent monotonic time to the run's time base; zero
// stays zero (the step did not happen).
func (c *Client) RunTime(mono int64) int64 {
	if mono == 0 {
		return 0
	}
	return max(mono-c.offset, 1)
}

// Skew is the uncertainty of RunTime.
func (c *Client) Skew() time.Duration { return c.skew }

// MaxSkew is the largest uncertainty RunTime has had in the client's
// lives.
func (c *Client) MaxSkew() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxSkew
}

// Do runs one operation, calling onEvent for each progress event, and
// returns its result. When timeout passes first it returns ErrTimeout; the
// operation may still be running, and the next Do first waits for it.
func (c *Client) Do(ctx context.Context, op agent.OpRequest, timeout time.Duration, onEvent func(agent.Response)) (agent.Result, error) {
	deadline := time.Now().Add(timeout)
	if err := c.drain(ctx, deadline); err != nil {
		return agent.Result{}, err
	}
	if err := c.Start(op); err != nil {
		return agent.Result{}, err
	}
	return c.Wait(ctx, op.ID, deadline, onEvent)
}

// Start sends an operation without waiting for it: the agent runs it after
// those sent before. Wait for each started operation in the order started.
func (c *Client) Start(op agent.OpRequest) error {
	if err := c.send(agent.Request{Type: agent.ReqOp, Op: &op}); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sent) > 0 {
		c.ahead++
	}
	c.sent = append(c.sent, op.ID)
	return nil
}

// Wait waits until deadline for the started operation id to finish,
// calling onEvent for each of its progress events. On ErrTimeout the
// operations still sent stay pending: the next Do first waits for them.
func (c *Client) Wait(ctx context.Context, id int64, deadline time.Time, onEvent func(agent.Response)) (agent.Result, error) {
	for {
		r, err := c.recv(ctx, deadline)
		if err != nil {
			if errors.Is(err, ErrCrashed) {
				c.finished(-1)
			}
			return agent.Result{}, err
		}
		if r.Type == agent.RespDone || r.Type == agent.RespError {
			c.finished(r.ID)
		}
		if r.ID != id {
			continue
		}
		switch r.Type {
		case agent.RespEvent:
			if onEvent != nil {
				onEvent(r)
			}
		case agent.RespDone:
			if r.Result == nil {
				return agent.Result{}, fmt.Errorf("%s: done without result", c.Name)
			}
			return *r.Result, nil
		case agent.RespError:
			return agent.Result{}, fmt.Errorf("%s: %s", c.Name, r.Error)
		}
	}
}

// finished forgets a sent operation whose end was read (-1: all of them,
// the agent is gone).
func (c *Client) finished(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id < 0 {
		c.sent = nil
		return
	}
	c.sent = slices.DeleteFunc(c.sent, func(s int64) bool { return s == id })
}

// drain waits until deadline for operations abandoned by a timeout to
// finish.
func (c *Client) drain(ctx context.Context, deadline time.Time) error {
	for {
		c.mu.Lock()
		pending := len(c.sent)
		c.mu.Unlock()
		if pending == 0 {
			return nil
		}
		r, err := c.recv(ctx, deadline)
		if err != nil {
			if errors.Is(err, ErrCrashed) {
				c.finished(-1)
			}
			return err
		}
		if r.Type == agent.RespDone || r.Type == agent.RespError {
			c.finished(r.ID)
		}
	}
}

// Close tells the agent to stop and closes its stdin.
func (c *Client) Close() error {
	_ = c.send(agent.Request{Type: agent.ReqStop})
	return c.current().stdin.Close()
}
