package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

// Error codes of the HTTP API.
const (
	codeLockHeld    = "lock_held"
	codeLockDelay   = "lock_delay"
	codeNotOwner    = "not_owner"
	codeNotLeader   = "not_leader"
	codeUnavailable = "unavailable"
	codeBadRequest  = "bad_request"
	codeInternal    = "internal"
)

// Wire types. Durations are whole milliseconds; remaining times are
// rounded up.
type (
	acquireRequest struct {
		Key        string `json:"key"`
		Owner      string `json:"owner"`
		TTLMillis  int64  `json:"ttl_ms,omitempty"`
		WaitMillis int64  `json:"wait_ms,omitempty"`
	}
	leaseRequest struct {
		Key   string `json:"key"`
		Owner string `json:"owner"`
		Token uint64 `json:"token"`
	}
	leaseResponse struct {
		Key       string `json:"key"`
		Owner     string `json:"owner"`
		Token     uint64 `json:"token"`
		TTLMillis int64  `json:"ttl_ms"`
		Renewed   bool   `json:"renewed"`
	}
	releaseResponse struct {
		Key      string `json:"key"`
		Token    uint64 `json:"token"`
		Released bool   `json:"released"`
	}
	lockResponse struct {
		Key                  string `json:"key"`
		Held                 bool   `json:"held"`
		Owner                string `json:"owner,omitempty"`
		Token                uint64 `json:"token,omitempty"`
		TTLMillis            int64  `json:"ttl_ms,omitempty"`
		RemainingMillis      int64  `json:"remaining_ms,omitempty"`
		LockDelay            bool   `json:"lock_delay"`
		DelayRemainingMillis int64  `json:"delay_remaining_ms,omitempty"`
		LastToken            uint64 `json:"last_token,omitempty"`
	}
	statusResponse struct {
		ID             string `json:"id"`
		Version        string `json:"version"`
		State          string `json:"state"`
		LeaderID       string `json:"leader_id,omitempty"`
		LeaderRaftAddr string `json:"leader_raft_addr,omitempty"`
		LeaderHTTPAddr string `json:"leader_http_addr,omitempty"`
		Term           uint64 `json:"term"`
		LastIndex      uint64 `json:"last_index"`
		CommitIndex    uint64 `json:"commit_index"`
		AppliedIndex   uint64 `json:"applied_index"`
		Ready          bool   `json:"ready"`
	}
	healthResponse struct {
		OK       bool   `json:"ok"`
		State    string `json:"state"`
		LeaderID string `json:"leader_id,omitempty"`
		Reason   string `json:"reason,omitempty"`
	}
	errorResponse struct {
		Error           string `json:"error"`
		Message         string `json:"message"`
		Token           uint64 `json:"token,omitempty"`
		RemainingMillis int64  `json:"remaining_ms,omitempty"`
		LeaderID        string `json:"leader_id,omitempty"`
		LeaderAddr      string `json:"leader_addr,omitempty"`
	}
)

// maxBody bounds request bodies.
const maxBody = 64 << 10

// handler is the node's HTTP API.
func (n *node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/acquire", n.handleAcquire)
	mux.HandleFunc("POST /v1/renew", n.handleRenew)
	mux.HandleFunc("POST /v1/release", n.handleRelease)
	mux.HandleFunc("GET /v1/lock", n.handleLock)
	mux.HandleFunc("GET /v1/status", n.handleStatus)
	mux.HandleFunc("GET /healthz", n.handleHealth)
	mux.HandleFunc("GET /metrics", n.handleMetrics)
	return mux
}

func (n *node) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var req acquireRequest
	if !decode(w, r, &req) {
		return
	}
	if req.TTLMillis < 0 || req.WaitMillis < 0 {
		writeError(w, badRequest("ttl_ms and wait_ms must not be negative"))
		return
	}
	g, err := n.acquire(r.Context(), req.Key, req.Owner,
		time.Duration(req.TTLMillis)*time.Millisecond, time.Duration(req.WaitMillis)*time.Millisecond)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseResponse{Key: g.Key, Owner: g.Owner, Token: g.Token, TTLMillis: millis(g.TTL), Renewed: g.Renewed})
}

func (n *node) handleRenew(w http.ResponseWriter, r *http.Request) {
	var req leaseRequest
	if !decode(w, r, &req) {
		return
	}
	g, err := n.renew(r.Context(), req.Key, req.Owner, req.Token)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseResponse{Key: g.Key, Owner: g.Owner, Token: g.Token, TTLMillis: millis(g.TTL), Renewed: true})
}

func (n *node) handleRelease(w http.ResponseWriter, r *http.Request) {
	var req leaseRequest
	if !decode(w, r, &req) {
		return
	}
	if err := n.release(r.Context(), req.Key, req.Owner, req.Token); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, releaseResponse{Key: req.Key, Token: req.Token, Released: true})
}

func (n *node) handleLock(w http.ResponseWriter, r *http.Request) {
	v, err := n.lockState(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, lockResponse{
		Key: v.Key, Held: v.Held, Owner: v.Owner, Token: v.Token,
		TTLMillis: millis(v.TTL), RemainingMillis: millis(v.Remaining),
		LockDelay: v.Delayed, DelayRemainingMillis: millis(v.DelayRemaining),
		LastToken: v.LastToken,
	})
}

func (n *node) status() statusResponse {
	addr, id := n.raft.LeaderWithID()
	return statusResponse{
		ID:             n.cfg.ID,
		Version:        Version,
		State:          n.raft.State().String(),
		LeaderID:       string(id),
		LeaderRaftAddr: string(addr),
		LeaderHTTPAddr: n.fsm.addr(string(id)),
		Term:           n.raft.CurrentTerm(),
		LastIndex:      n.raft.LastIndex(),
		CommitIndex:    n.raft.CommitIndex(),
		AppliedIndex:   n.raft.AppliedIndex(),
		Ready:          n.raft.State() == raft.Leader && n.ready.Load(),
	}
}

func (n *node) handleStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, n.status())
}

func (n *node) handleHealth(w http.ResponseWriter, _ *http.Request) {
	ok, reason := n.health()
	_, id := n.raft.LeaderWithID()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, healthResponse{OK: ok, State: n.raft.State().String(), LeaderID: string(id), Reason: reason})
}

func (n *node) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	g := gauges{
		isLeader:     n.raft.State() == raft.Leader,
		term:         n.raft.CurrentTerm(),
		lastIndex:    n.raft.LastIndex(),
		appliedIndex: n.raft.AppliedIndex(),
	}
	if err := n.metrics.writePrometheus(&buf, g); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// decode reads r's JSON body into v, answering bad_request on failure.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, badRequest("decode request body: %v", err))
		return false
	}
	return true
}

// writeError answers with err's code, HTTP status and details.
func writeError(w http.ResponseWriter, err error) {
	resp := errorResponse{Error: codeInternal, Message: err.Error()}
	status := http.StatusInternalServerError
	var oe *opError
	if errors.As(err, &oe) {
		switch oe.kind {
		case errLockHeld:
			resp.Error, status = codeLockHeld, http.StatusConflict
		case errLockDelay:
			resp.Error, status = codeLockDelay, http.StatusLocked
		case errNotOwner:
			resp.Error, status = codeNotOwner, http.StatusForbidden
		case errNotLeader:
			resp.Error, status = codeNotLeader, http.StatusMisdirectedRequest
		case errUnavailable:
			resp.Error, status = codeUnavailable, http.StatusServiceUnavailable
		case errBadRequest:
			resp.Error, status = codeBadRequest, http.StatusBadRequest
		}
		resp.Token = oe.token
		resp.RemainingMillis = millis(oe.remaining)
		resp.LeaderID, resp.LeaderAddr = oe.leaderID, oe.leaderAddr
	}
	writeJSON(w, status, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, `{"error":%q,"message":%q}`, codeInternal, err.Error())
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
