package postgres_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/splitbrain/splitbrain/catalog" // every role, as the images are built
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/targets/store/postgres"
)

// TestNewClientOptions: --store-opt check is checked against its
// declaration where the agents dial (store.Dial), and the client writes
// as it says.
func TestNewClientOptions(t *testing.T) {
	for _, opts := range []option.Set{nil, {"check": postgres.CheckToken}, {"check": postgres.CheckVersion}} {
		c, err := store.Dial(postgres.Name, "127.0.0.1:5432", time.Second, opts)
		if err != nil {
			t.Errorf("%v: %v", opts, err)
			continue
		}
		c.(*postgres.Client).Close()
	}
	_, err := store.Dial(postgres.Name, "127.0.0.1:5432", time.Second, option.Set{"check": "tokens"})
	if err == nil || !strings.Contains(err.Error(), `--store-opt check="tokens" for store postgres: want one of token, version`) {
		t.Fatalf("check=tokens: %v", err)
	}
	k, err := store.Lookup(postgres.Name)
	if err != nil || k.Role != postgres.Role || k.Deploy == nil || k.Dial == nil {
		t.Fatalf("registration: %+v %v", k, err)
	}
}

// TestUnreachable: nothing listens, so nothing was applied.
func TestUnreachable(t *testing.T) {
	c := postgres.NewClient("127.0.0.1:1", time.Second, postgres.CheckToken)
	defer c.Close()
	if _, err := c.Write(context.Background(), "k", 1, 1, false, 0); !errors.Is(err, store.ErrUnreachable) {
		t.Fatalf("write to a closed port: %v, want store.ErrUnreachable", err)
	}
}

// TestStore deploys the store on Docker and holds its clients to the
// fencing rule the built-in store keeps, in the database.
func TestStore(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "t", postgres.Role)
	img := imgs[postgres.Role]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, addr, err := postgres.Deploy(ctx, rt, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := postgres.Versions(ctx, n)["store_postgres"]; !strings.HasPrefix(v, "15.") {
		t.Fatalf("version %q", v)
	}
	dial := func(check string) *postgres.Client {
		c := postgres.NewClient(addr, 5*time.Second, check)
		t.Cleanup(func() { c.Close() })
		return c
	}
	stale := func(t *testing.T, e store.Entry, err error, highest uint64) {
		t.Helper()
		var se *store.StaleError
		if !errors.As(err, &se) || !errors.Is(err, store.ErrStaleToken) || se.Highest != highest || e.Token != highest {
			t.Fatalf("want a stale refusal naming %d: %+v %v", highest, e, err)
		}
	}

	t.Run("token", func(t *testing.T) {
		c := dial(postgres.CheckToken)
		e, err := c.Write(ctx, "t", 1, 11, true, 5)
		if err != nil || e.Value != 1 || e.Tag != 11 || e.Token != 5 {
			t.Fatalf("fenced write: %+v %v", e, err)
		}
		e, err = c.Write(ctx, "t", 9, 12, true, 4)
		stale(t, e, err, 5)
		e, err = c.Read(ctx, "t", true, 3)
		stale(t, e, err, 5)
		// A fenced read registers its token: an older holder's write is
		// refused even though the newer one has not written yet.
		if e, err = c.Read(ctx, "t", true, 7); err != nil || e.Value != 1 || e.Token != 7 {
			t.Fatalf("fenced read with a newer token: %+v %v", e, err)
		}
		e, err = c.Write(ctx, "t", 9, 13, true, 6)
		stale(t, e, err, 7)
		// The holder's own write after its read (an equal token) lands.
		if e, err = c.Write(ctx, "t", 2, 14, true, 7); err != nil || e.Value != 2 {
			t.Fatalf("write with the read's token: %+v %v", e, err)
		}
		// An unfenced write is not checked.
		if e, err = c.Write(ctx, "t", 3, 15, false, 0); err != nil || e.Value != 3 || e.Token != 7 {
			t.Fatalf("unfenced write: %+v %v", e, err)
		}
		if e, err = dial(postgres.CheckToken).Read(ctx, "t", false, 0); err != nil || e.Value != 3 || e.Tag != 15 {
			t.Fatalf("another client reads %+v %v", e, err)
		}
	})

	t.Run("version", func(t *testing.T) {
		a, b := dial(postgres.CheckVersion), dial(postgres.CheckVersion)
		if _, err := a.Write(ctx, "v", 1, 1, false, 0); !errors.Is(err, store.ErrUnreachable) {
			t.Fatalf("a write with no read before it: %v", err)
		}
		if _, err := a.Read(ctx, "v", false, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Read(ctx, "v", false, 0); err != nil {
			t.Fatal(err)
		}
		if e, err := b.Write(ctx, "v", 1, 21, false, 0); err != nil || e.Value != 1 {
			t.Fatalf("b's write after its read: %+v %v", e, err)
		}
		// a's read is no longer current: b wrote in between.
		if _, err := a.Write(ctx, "v", 1, 22, false, 0); !errors.Is(err, store.ErrStaleToken) {
			t.Fatalf("a's write on a stale read: %v", err)
		}
		if e, err := b.Read(ctx, "v", false, 0); err != nil || e.Tag != 21 {
			t.Fatalf("after the refusal: %+v %v", e, err)
		}
	})

	t.Run("killed", func(t *testing.T) {
		c := dial(postgres.CheckToken)
		if _, err := c.Read(ctx, "k", false, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, err := c.Write(ctx, "k", 1, 31, false, 0)
		if !errors.Is(err, store.ErrUnreachable) && !errors.Is(err, store.ErrIndeterminate) {
			t.Fatalf("write to a killed store: %v, want unreachable or indeterminate", err)
		}
	})
}
