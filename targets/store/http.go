package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Port is the store's default listening port.
const Port = 7000

// Wire types of the HTTP/JSON API.
//
//	GET  /v1/read?key=K[&token=T]   -> 200 Entry | 409 errorBody
//	POST /v1/write  writeRequest     -> 200 Entry | 409 errorBody
//	GET  /v1/stats                  -> 200 Stats
//	GET  /healthz                   -> 200
type writeRequest struct {
	Key    string `json:"key"`
	Value  int64  `json:"value"`
	Tag    int64  `json:"tag"`
	Fenced bool   `json:"fenced"`
	Token  uint64 `json:"token"`
}

type errorBody struct {
	Error   string `json:"error"`
	Token   uint64 `json:"token,omitempty"`
	Highest uint64 `json:"highest,omitempty"`
}

const codeStale = "stale-token"

// Server serves a Store over HTTP. It is safe for concurrent use.
type Server struct {
	Store *Store
	Log   *slog.Logger
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Store.Stats()) })
	mux.HandleFunc("GET /v1/read", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		key := q.Get("key")
		if key == "" {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "missing key"})
			return
		}
		var (
			fenced bool
			token  uint64
		)
		if t := q.Get("token"); t != "" {
			v, err := strconv.ParseUint(t, 10, 64)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad token"})
				return
			}
			fenced, token = true, v
		}
		e, err := s.Store.Read(key, fenced, token)
		s.reply(w, e, err, token)
	})
	mux.HandleFunc("POST /v1/write", func(w http.ResponseWriter, r *http.Request) {
		var req writeRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Key == "" {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad write request"})
			return
		}
		e, err := s.Store.Write(req.Key, req.Value, req.Tag, req.Fenced, req.Token)
		s.reply(w, e, err, req.Token)
	})
	return mux
}

func (s *Server) reply(w http.ResponseWriter, e Entry, err error, token uint64) {
	if err != nil {
		writeJSON(w, http.StatusConflict, errorBody{Error: codeStale, Token: token, Highest: e.Token})
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve listens on addr and serves until ctx is done.
func Serve(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("store listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: (&Server{Store: New(), Log: log}).Handler(), ReadHeaderTimeout: 5 * time.Second}
	log.Info("store listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		return fmt.Errorf("store serve: %w", err)
	}
}

// ErrUnreachable means the request certainly did not reach the store (the
// connection could not be made): nothing was applied.
var ErrUnreachable = errors.New("store unreachable")

// ErrIndeterminate means the request may or may not have been applied (it
// was sent, but no answer came back in time).
var ErrIndeterminate = errors.New("store outcome unknown")

// Client talks to a store server. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the store at addr ("host:port"). Each
// request is bounded by timeout.
func NewClient(addr string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{base: "http://" + addr, http: &http.Client{Transport: tr, Timeout: timeout}}
}

// Read reads key; when fenced, token is checked and registered.
func (c *Client) Read(ctx context.Context, key string, fenced bool, token uint64) (Entry, error) {
	q := url.Values{"key": {key}}
	if fenced {
		q.Set("token", strconv.FormatUint(token, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/read?"+q.Encode(), nil)
	if err != nil {
		return Entry{}, fmt.Errorf("store read %s: %w", key, err)
	}
	return c.do(req, "read "+key)
}

// Write writes value (with its tag) to key; when fenced, token is checked.
func (c *Client) Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (Entry, error) {
	body, _ := json.Marshal(writeRequest{Key: key, Value: value, Tag: tag, Fenced: fenced, Token: token})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/write", bytes.NewReader(body))
	if err != nil {
		return Entry{}, fmt.Errorf("store write %s: %w", key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, "write "+key)
}

// Stats fetches the store's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/stats", nil)
	if err != nil {
		return Stats{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Stats{}, fmt.Errorf("store stats: %w", classify(err))
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return Stats{}, fmt.Errorf("store stats: decode: %w", err)
	}
	return st, nil
}

func (c *Client) do(req *http.Request, what string) (Entry, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return Entry{}, fmt.Errorf("store %s: %w", what, classify(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var e Entry
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			return Entry{}, fmt.Errorf("store %s: decode: %w: %w", what, ErrIndeterminate, err)
		}
		return e, nil
	case http.StatusConflict:
		var eb errorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		return Entry{Token: eb.Highest}, fmt.Errorf("store %s: %w", what, &StaleError{Token: eb.Token, Highest: eb.Highest})
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Entry{}, fmt.Errorf("store %s: status %d: %s", what, resp.StatusCode, bytes.TrimSpace(b))
	}
}

// classify wraps a transport error in ErrUnreachable when the connection was
// never made, and in ErrIndeterminate otherwise.
func classify(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return fmt.Errorf("%w: %w", ErrIndeterminate, err)
}
