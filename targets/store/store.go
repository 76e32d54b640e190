// Package store is the protected resource of every splitbrain run: a small
// keyed counter store that can enforce fencing tokens.
//
// Each key holds a value, the tag of the write that produced it, and the
// highest fencing token the store has accepted for it. A fenced access
// (a read or a write carrying a token) is checked against that token: a
// strictly greater token is accepted and recorded, an equal token is treated
// as the same holder (an idempotent retry), and a smaller one is always
// rejected with [ErrStaleToken] and counted. Unfenced writes bypass the
// check, which is exactly what an unfenced client or a bypass writer does.
//
// A read-modify-write must present its token on the read as well: otherwise a
// stale holder's write can land between a newer holder's read and its write,
// and both writes are accepted. [Store.Read] with a token registers it.
//
// [Server] serves a Store over HTTP/JSON and [Client] talks to it; [Mem] is a
// client in the same process, with faults to order, for tests.
package store

import (
	"errors"
	"sync"
)

// ErrStaleToken is returned when a fenced access carries a token smaller
// than the highest the key has accepted.
var ErrStaleToken = errors.New("stale fencing token")

// Entry is a key's state.
type Entry struct {
	Value int64 `json:"value"`
	Tag   int64 `json:"tag"`
	// Token is the highest fencing token accepted for the key.
	Token uint64 `json:"token"`
}

// Stats counts what the store did.
type Stats struct {
	Reads        int64 `json:"reads"`
	Writes       int64 `json:"writes"`
	FencedWrites int64 `json:"fenced_writes"`
	// Rejections counts fenced reads and writes refused as stale.
	Rejections int64 `json:"rejections"`
	// WriteRejections counts only the refused writes.
	WriteRejections int64 `json:"write_rejections"`
}

// StaleError describes a rejection: the token presented and the highest seen.
type StaleError struct {
	Token, Highest uint64
}

func (e *StaleError) Error() string {
	return "stale fencing token"
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleError) Is(target error) bool { return target == ErrStaleToken }

// Store is an in-memory counter store. It is linearizable: every operation
// runs under one mutex. It is safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	keys  map[string]*Entry
	stats Stats
}

// New returns an empty store; every key starts at value 0, tag 0, token 0.
func New() *Store {
	return &Store{keys: make(map[string]*Entry)}
}

func (s *Store) entry(key string) *Entry {
	e, ok := s.keys[key]
	if !ok {
		e = &Entry{}
		s.keys[key] = e
	}
	return e
}

// check applies the fencing rule to token; it must be called with s.mu held.
func (s *Store) check(e *Entry, token uint64) error {
	if token < e.Token {
		s.stats.Rejections++
		return &StaleError{Token: token, Highest: e.Token}
	}
	e.Token = token
	return nil
}

// Read returns key's entry. When fenced, token is checked and recorded first.
func (s *Store) Read(key string, fenced bool, token uint64) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Reads++
	e := s.entry(key)
	if fenced {
		if err := s.check(e, token); err != nil {
			return *e, err
		}
	}
	return *e, nil
}

// Write sets key to value, recording tag as the write's identity. When
// fenced, token is checked first and a stale write changes nothing.
func (s *Store) Write(key string, value, tag int64, fenced bool, token uint64) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(key)
	if fenced {
		s.stats.FencedWrites++
		if err := s.check(e, token); err != nil {
			s.stats.WriteRejections++
			return *e, err
		}
	} else {
		s.stats.Writes++
	}
	e.Value, e.Tag = value, tag
	return *e, nil
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
