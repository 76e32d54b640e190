package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"github.com/splitbrain/splitbrain/targets/lockd/wire"
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
	var req wire.AcquireRequest
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
	writeJSON(w, http.StatusOK, wire.LeaseResponse{Key: g.Key, Owner: g.Owner, Token: g.Token, TTLMillis: wire.Millis(g.TTL), Renewed: g.Renewed})
}

func (n *node) handleRenew(w http.ResponseWriter, r *http.Request) {
	var req wire.LeaseRequest
	if !decode(w, r, &req) {
		return
	}
	g, err := n.renew(r.Context(), req.Key, req.Owner, req.Token)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LeaseResponse{Key: g.Key, Owner: g.Owner, Token: g.Token, TTLMillis: wire.Millis(g.TTL), Renewed: true})
}

func (n *node) handleRelease(w http.ResponseWriter, r *http.Request) {
	var req wire.LeaseRequest
	if !decode(w, r, &req) {
		return
	}
	if err := n.release(r.Context(), req.Key, req.Owner, req.Token); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ReleaseResponse{Key: req.Key, Token: req.Token, Released: true})
}

func (n *node) handleLock(w http.ResponseWriter, r *http.Request) {
	v, err := n.lockState(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LockResponse{
		Key: v.Key, Held: v.Held, Owner: v.Owner, Token: v.Token,
		TTLMillis: wire.Millis(v.TTL), RemainingMillis: wire.Millis(v.Remaining),
		LockDelay: v.Delayed, DelayRemainingMillis: wire.Millis(v.DelayRemaining),
		LastToken: v.LastToken,
	})
}

func (n *node) status() wire.StatusResponse {
	addr, id := n.raft.LeaderWithID()
	return wire.StatusResponse{
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
		NoSync:         n.cfg.NoSync,
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
	writeJSON(w, code, wire.HealthResponse{OK: ok, State: n.raft.State().String(), LeaderID: string(id), Reason: reason})
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
	resp := wire.ErrorResponse{Error: wire.CodeInternal, Message: err.Error()}
	status := http.StatusInternalServerError
	var oe *opError
	if errors.As(err, &oe) {
		switch oe.kind {
		case errLockHeld:
			resp.Error, status = wire.CodeLockHeld, http.StatusConflict
		case errLockDelay:
			resp.Error, status = wire.CodeLockDelay, http.StatusLocked
		case errNotOwner:
			resp.Error, status = wire.CodeNotOwner, http.StatusForbidden
		case errNotLeader:
			resp.Error, status = wire.CodeNotLeader, http.StatusMisdirectedRequest
		case errUnavailable:
			resp.Error, status = wire.CodeUnavailable, http.StatusServiceUnavailable
		case errBadRequest:
			resp.Error, status = wire.CodeBadRequest, http.StatusBadRequest
		}
		resp.Token = oe.token
		resp.RemainingMillis = wire.Millis(oe.remaining)
		resp.LeaderID, resp.LeaderAddr = oe.leaderID, oe.leaderAddr
	}
	writeJSON(w, status, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, `{"error":%q,"message":%q}`, wire.CodeInternal, err.Error())
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
