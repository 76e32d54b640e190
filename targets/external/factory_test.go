package external_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// TestFactoryOf: a Go library's recipe is made by its New; an adapter's is
// run through this protocol (not the Go factory, which says where to look);
// Lockers has a factory for a client the user brings.
func TestFactoryOf(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	called := errors.New("the Go library was called")
	goRecipe := targets.Recipe{Kind: "fo-go", New: func(context.Context, targets.RecipeConfig, string, *slog.Logger) (targets.Locker, error) {
		return nil, called
	}}
	if _, err := external.FactoryOf(goRecipe)(ctx, targets.RecipeConfig{Kind: "fo-go"}, "c1", log); !errors.Is(err, called) {
		t.Fatalf("Go recipe: %v", err)
	}
	adapter := targets.Recipe{Kind: "fo-adapter", Adapter: "exit 3"}
	if _, err := adapter.Factory()(ctx, targets.RecipeConfig{Kind: "fo-adapter"}, "c1", log); err == nil || !strings.Contains(err.Error(), "external.FactoryOf") {
		t.Fatalf("an adapter recipe's Go factory: %v", err)
	}
	l, err := external.FactoryOf(adapter)(ctx, targets.RecipeConfig{Kind: "fo-adapter"}, "c1", log)
	if err == nil {
		l.Close()
		t.Fatal("an adapter that exits at once started")
	}
	if strings.Contains(err.Error(), "external.FactoryOf") {
		t.Fatalf("the adapter recipe went to the Go factory: %v", err)
	}
	if _, ok := external.Lockers()[external.Kind]; !ok {
		t.Fatal("Lockers has no factory for a client the user brings")
	}
}
