// Package external runs lock clients written in any language: an adapter
// process that wraps a lock library and speaks splitbrain's client
// protocol — one JSON object per line on its stdin (requests) and stdout
// (replies), its stderr a log — driven by a [Locker], which is a
// [targets.Locker] like the recipes compiled into the agent.
//
// The protocol is documented for adapter authors in
// docs/client-protocol.md; this file is its Go form. A request carries an
// id and a type, and every request but hello a relative deadline
// (deadline_ms, counted from the moment the adapter reads the line, since
// the adapter's own clock may be skewed); a reply carries the id it
// answers. The agent enforces every deadline on its own monotonic clock;
// garbage on stdout, a dead process and a late reply are errors of
// distinct history kinds (history.ErrClientProtocol, ErrClientCrashed,
// ErrClientTimeout), the operation fails, and the run goes on: a dead
// adapter is started again (with back-off) before the next operation.
//
// [Check] runs an adapter through a conformance check against a lock
// service the caller provides, reporting each protocol mistake in plain
// words (`splitbrain client-check`).
package external

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/splitbrain/splitbrain/targets"
)

// FactoryOf is the factory of recipe r: the process of its Adapter,
// speaking this protocol in ClientDir, or its Go library
// (targets.Recipe.Factory).
func FactoryOf(r targets.Recipe) targets.LockerFactory {
	if r.New == nil && r.Adapter != "" {
		return Factory(r.Kind, r.Adapter, ClientDir)
	}
	return r.Factory()
}

// Lockers maps every registered recipe's kind to its factory, as client
// agents need them, and [Kind] to the factory of a client the user brings
// (its command line in targets.RecipeConfig.Command).
func Lockers() map[string]targets.LockerFactory {
	out := map[string]targets.LockerFactory{}
	for _, r := range targets.Recipes() {
		out[r.Kind] = FactoryOf(r)
	}
	out[Kind] = Factory(Kind, "", ClientDir)
	return out
}

// Version is the protocol version this package speaks.
const Version = 1

// Request types, sent by the agent.
const (
	TypeHello   = "hello"
	TypeAcquire = "acquire"
	TypeRelease = "release"
	TypeRenew   = "renew"
	TypeHeld    = "held"
	TypeClose   = "close"
)

// Reply types, sent by the adapter.
const (
	TypeHelloOK     = "hello_ok"
	TypeGranted     = "granted"
	TypeBusy        = "busy"
	TypeUnavailable = "unavailable"
	TypeError       = "error"
	TypeOK          = "ok"
	TypeNotOwner    = "not_owner"
	TypeClosed      = "closed"
	// TypeHeld ("held") is also the reply to a held request.
)

// Renewal modes an adapter may declare (Offers.RenewMode).
const (
	// RenewWatchdog: the library renews a held lock by itself in the
	// background while the process runs.
	RenewWatchdog = "watchdog"
	// RenewRequest: the adapter renews when it is sent a renew request.
	RenewRequest = "request"
	// RenewNone: a lock lasts one TTL.
	RenewNone = "none"
)

// Request is one line from the agent to the adapter. Which fields are set
// depends on Type (see docs/client-protocol.md).
type Request struct {
	// ID is positive and unique within one life of the adapter process.
	ID   int64  `json:"id"`
	Type string `json:"type"`

	// Hello: the protocol version, the client's name ("c3"), the backend
	// ("redis"), the lock service's addresses, the lease TTL and the
	// client's options (--recipe-opt).
	Protocol  int               `json:"protocol,omitempty"`
	Client    string            `json:"client,omitempty"`
	Backend   string            `json:"backend,omitempty"`
	Endpoints []string          `json:"endpoints,omitempty"`
	Options   map[string]string `json:"options,omitempty"`

	// Key is the lock's name (acquire, release, renew, held).
	Key string `json:"key,omitempty"`
	// Lease is the opaque string a granted reply gave (release, renew,
	// held).
	Lease string `json:"lease,omitempty"`
	// TTLMillis is the lease time to live (hello, acquire, renew).
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	// DeadlineMillis is how long the adapter has to answer, counted from
	// when it reads the line (every request but hello).
	DeadlineMillis int64 `json:"deadline_ms,omitempty"`
}

// Offers is what an adapter's library can do, declared in its hello_ok.
type Offers struct {
	// Token: granted replies carry a fencing token that strictly grows
	// with every grant of a key.
	Token bool `json:"token"`
	// Renew: the lock is renewed while held, as RenewMode says.
	Renew     bool   `json:"renew"`
	RenewMode string `json:"renew_mode,omitempty"`
	// CheckedRelease: a release deletes only the caller's own lock.
	CheckedRelease bool `json:"checked_release"`
	// Held: the adapter answers held requests ("is it still mine?").
	Held bool `json:"held"`
	// Session: the lock lives with the adapter's session to the service
	// (a database's session lock), not for a TTL.
	Session bool `json:"session,omitempty"`
}

// Reply is one line from the adapter to the agent.
type Reply struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`

	// HelloOK: the protocol version, the library wrapped, its version, the
	// adapter's language and what it offers.
	Protocol int     `json:"protocol,omitempty"`
	Library  string  `json:"library,omitempty"`
	Version  string  `json:"version,omitempty"`
	Language string  `json:"language,omitempty"`
	Offers   *Offers `json:"offers,omitempty"`

	// Granted: the lease handle and, when offered, the fencing token.
	Lease string  `json:"lease,omitempty"`
	Token *uint64 `json:"token,omitempty"`

	// Held answers a held request.
	Held *bool `json:"held,omitempty"`

	// Message says why (unavailable, error).
	Message string `json:"message,omitempty"`
}

// answers lists the reply types allowed for each request type; an error
// reply is always allowed.
var answers = map[string][]string{
	TypeHello:   {TypeHelloOK},
	TypeAcquire: {TypeGranted, TypeBusy, TypeUnavailable},
	TypeRelease: {TypeOK, TypeNotOwner, TypeUnavailable},
	TypeRenew:   {TypeOK, TypeNotOwner, TypeUnavailable},
	TypeHeld:    {TypeHeld, TypeUnavailable},
	TypeClose:   {TypeClosed},
}

// ParseReply decodes one line of an adapter's stdout. The error says in
// plain words what is wrong with it: not JSON, not an object, no id, no
// type. Fields this package does not know are ignored (and listed in
// unknown, so that a conformance check can point them out).
func ParseReply(line []byte) (rep Reply, unknown []string, err error) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return Reply{}, nil, errors.New("an empty line")
	}
	if trimmed[0] != '{' {
		return Reply{}, nil, fmt.Errorf("%s, which is not a JSON object (print logs to stderr, not stdout)", quote(line))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return Reply{}, nil, fmt.Errorf("%s, which is not valid JSON: %v", quote(line), err)
	}
	if err := json.Unmarshal(trimmed, &rep); err != nil {
		return Reply{}, nil, fmt.Errorf("%s: a field has the wrong type: %v", quote(line), err)
	}
	known := map[string]bool{"id": true, "type": true, "protocol": true, "library": true, "version": true,
		"language": true, "offers": true, "lease": true, "token": true, "held": true, "message": true}
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	switch {
	case raw["id"] == nil:
		return rep, unknown, fmt.Errorf("%s has no \"id\" (every reply names the request it answers)", quote(line))
	case rep.ID <= 0:
		return rep, unknown, fmt.Errorf("%s has id %d (ids are the positive integers the requests carried)", quote(line), rep.ID)
	case rep.Type == "":
		return rep, unknown, fmt.Errorf("%s has no \"type\"", quote(line))
	}
	return rep, unknown, nil
}

// CheckReply says what is wrong with rep as the answer to req from an
// adapter whose hello_ok declared offers (nil while answering hello).
func CheckReply(req Request, rep Reply, offers *Offers) error {
	if rep.Type == TypeError {
		if rep.Message == "" {
			return fmt.Errorf("its error reply to %s %d has no \"message\" (say what went wrong)", req.Type, req.ID)
		}
		return nil
	}
	allowed := answers[req.Type]
	ok := false
	for _, t := range allowed {
		if t == rep.Type {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("it answered %s %d with type %q; a %s is answered with %s or error",
			req.Type, req.ID, rep.Type, req.Type, strings.Join(quoteAll(allowed), ", "))
	}
	switch rep.Type {
	case TypeHelloOK:
		switch {
		case rep.Protocol != Version:
			return fmt.Errorf("its hello_ok says protocol %d; this agent speaks protocol %d", rep.Protocol, Version)
		case rep.Library == "":
			return errors.New("its hello_ok names no \"library\" (the lock library it wraps, or your own name for it)")
		case rep.Offers == nil:
			return errors.New("its hello_ok has no \"offers\" object (token, renew, checked_release, held)")
		}
		switch rep.Offers.RenewMode {
		case "", RenewWatchdog, RenewRequest, RenewNone:
		default:
			return fmt.Errorf("its hello_ok says renew_mode %q; want %q, %q or %q", rep.Offers.RenewMode, RenewWatchdog, RenewRequest, RenewNone)
		}
	case TypeGranted:
		if rep.Lease == "" {
			return fmt.Errorf("its grant of %s (request %d) has no \"lease\" (an opaque string the agent hands back on release)", req.Key, req.ID)
		}
		if offers != nil && offers.Token {
			if rep.Token == nil {
				return fmt.Errorf("its grant of %s (request %d) has no \"token\", though its hello_ok offered tokens", req.Key, req.ID)
			}
			if *rep.Token == 0 {
				return fmt.Errorf("its grant of %s (request %d) has token 0 (tokens start at 1)", req.Key, req.ID)
			}
		} else if rep.Token != nil {
			return fmt.Errorf("its grant of %s (request %d) carries a token, though its hello_ok said \"token\": false", req.Key, req.ID)
		}
	case TypeHeld:
		if rep.Held == nil {
			return fmt.Errorf("its held reply to request %d has no \"held\": true or false", req.ID)
		}
	}
	return nil
}

func quote(line []byte) string {
	const max = 120
	s := string(bytes.TrimRight(line, "\r\n"))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", s)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = `"` + s + `"`
	}
	return out
}

// Kind is the recipe kind of a client the user brings: its adapter's
// command line travels in targets.RecipeConfig.Command.
const Kind = targets.ExternalKind

// ClientDir is where a client's files are in a client image (the files
// of --client-files, an adapter shipped with a library's recipe): adapters
// run with it as their working directory.
const ClientDir = "/opt/splitbrain/client"
