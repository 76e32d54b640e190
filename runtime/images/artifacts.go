package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Artifacts returns the static binaries the nodes of roles run — the
// splitbrain binary, and each role's extras (etcd for the etcd role) —
// building those not yet in the cache, exactly as the images get them, but
// without building images: it needs no Docker engine (b.Client may be
// nil). Runtimes without images (package ssh) copy these files to their
// hosts; each Artifact's Dest is the path commands use for it.
//
// Like Ensure it holds the builder's lock file while it builds, so
// concurrent callers on one machine build each binary once.
func (b *Builder) Artifacts(ctx context.Context, roles []string) ([]Artifact, error) {
	for _, r := range roles {
		if !slices.Contains(Roles, r) {
			return nil, fmt.Errorf("unknown role %q (known: %s)", r, strings.Join(Roles, ", "))
		}
	}
	if err := os.MkdirAll(b.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("binary cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(b.CacheDir, "images.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	self, err := b.splitbrainBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("splitbrain binary: %w", err)
	}
	out := []Artifact{self}
	for _, role := range roles {
		for _, f := range b.Extra[role] {
			a, err := f(ctx, b)
			if err != nil {
				return nil, fmt.Errorf("binaries of %s: %w", role, err)
			}
			if !slices.ContainsFunc(out, func(o Artifact) bool { return o.Dest == a.Dest }) {
				out = append(out, a)
			}
		}
	}
	return out, nil
}
