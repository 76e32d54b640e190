package harness_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	_ "github.com/splitbrain/splitbrain/nemesis/powerloss"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

// noTokenRecipe is a client of the in-memory backend that gives no fencing
// token.
const noTokenRecipe = "test-no-token"

func init() {
	targets.RegisterRecipe(targets.Recipe{
		Kind: noTokenRecipe, Backends: []string{inmem.Name}, CheckedRelease: true,
		New: func(context.Context, targets.RecipeConfig, string, *slog.Logger) (targets.Locker, error) {
			return nil, errors.New("never made: the run is refused first")
		},
	})
}

// TestFencedWithoutTokenRefusedFirst: a fenced workload with a client that
// gives no token is refused as bad input before any image or container
// work, and nothing is written under --results.
func TestFencedWithoutTokenRefusedFirst(t *testing.T) {
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Client, cfg.Workload = inmem.Name, noTokenRecipe, "fenced-counter"
	cfg.ResultsDir = t.TempDir()
	w := harnesstest.World{}
	deps := w.Deps(t)
	deps.Images, deps.NewRuntime = nil, nil
	deps = harness.Deps{
		Backends: deps.Backends,
		Images: func(context.Context, []string) (map[string]string, error) {
			t.Fatal("images asked for")
			return nil, nil
		},
		NewRuntime: func(context.Context, string, bool, *slog.Logger) (runtime.Runtime, error) {
			t.Fatal("a runtime was made")
			return nil, nil
		},
	}
	out, err := harness.Run(context.Background(), cfg, deps)
	var ie *harness.InputError
	if !errors.As(err, &ie) || out != nil || !strings.Contains(err.Error(), "gives none") {
		t.Fatalf("run: %v (outcome %v), want a bad-input refusal", err, out)
	}
	if ents, _ := os.ReadDir(cfg.ResultsDir); len(ents) != 0 {
		t.Fatalf("the refused run wrote %d entries under --results", len(ents))
	}
}

// mute is a lock client that says, as an adapter does in its handshake,
// that it gives no token.
type mute struct{ targets.Locker }

func (mute) Describe() targets.ClientInfo {
	return targets.ClientInfo{Library: "mute", Version: "1", CheckedRelease: true}
}

// TestFencedWithoutTokenFromHandshakeWritesNothing: a client that says
// only in its handshake that it gives no token (a user's adapter) is
// refused once it has said so; the containers go, and nothing is left
// under --results (not even the latest link).
func TestFencedWithoutTokenFromHandshakeWritesNothing(t *testing.T) {
	const kind = "test-mute-adapter"
	targets.RegisterRecipe(targets.Recipe{Kind: kind, Backends: []string{inmem.Name}, Fencing: true, CheckedRelease: true,
		New: func(context.Context, targets.RecipeConfig, string, *slog.Logger) (targets.Locker, error) {
			return nil, errors.New("made by the world")
		}})
	w := harnesstest.World{}
	w.Lockers = map[string]targets.LockerFactory{kind: func(ctx context.Context, rc targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
		rc.Kind = inmem.Kind
		l, err := w.Last().Locks.Factory()(ctx, rc, client, log)
		return mute{l}, err
	}}
	deps := w.Deps(t)
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Client, cfg.Workload, cfg.Nemesis = inmem.Name, kind, "fenced-counter", "none"
	cfg.ResultsDir = t.TempDir()
	out, err := harness.Run(context.Background(), cfg, deps)
	var ie *harness.InputError
	if !errors.As(err, &ie) || out != nil || !strings.Contains(err.Error(), "mute gives none") {
		t.Fatalf("run: %v (outcome %v), want a bad-input refusal naming the client", err, out)
	}
	if ents, _ := os.ReadDir(cfg.ResultsDir); len(ents) != 0 {
		t.Fatalf("the refused run left %d entries under --results", len(ents))
	}
	if n := w.Last().Runtime; n == nil {
		t.Fatal("no runtime: the refusal should come from the handshake")
	}
}

// TestPowerLossRefusedWithoutDevices: a power-loss run on a runtime that
// cannot give nodes /dev/fuse (the in-memory one) is refused as bad input
// in one line naming the fix, before any node starts.
func TestPowerLossRefusedWithoutDevices(t *testing.T) {
	cfg := memConfig(t, "fenced-counter")
	cfg.Nemesis = "power-loss"
	var w harnesstest.World
	_, err := harness.Run(context.Background(), cfg, w.Deps(t))
	if err == nil || !harness.IsBadInput(err) || !strings.Contains(err.Error(), "docker runtime") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v, want a one-line bad-input refusal naming the docker runtime", err)
	}
	if n := len(w.Last().Runtime.Nodes()); n != 0 {
		t.Errorf("%d nodes started before the refusal", n)
	}
}
