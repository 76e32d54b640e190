package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Artifacts returns the files the nodes of roles run — the splitbrain
// binary, and each role's own files — making those not yet in the cache,
// exactly as the images get them, but without building images: it needs
// no Docker engine (b.Client may be nil). Runtimes without images (package
// ssh) copy these files to their hosts; each Artifact's Dest is the path
// commands use for it. A role's Debian packages are the hosts' business.
//
// Like Ensure it holds the builder's lock file while it builds, so
// concurrent callers on one machine build each binary once.
func (b *Builder) Artifacts(ctx context.Context, roles []string) ([]Artifact, error) {
	plans, err := PlanRoles(roles)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, p := range plans {
		for _, f := range p.Files {
			if !slices.ContainsFunc(files, func(g File) bool { return g.Dest == f.Dest }) {
				files = append(files, f)
			}
		}
	}
	return b.Make(ctx, files...)
}

// Make returns files, making those not yet in the cache, holding the
// builder's lock file as Ensure does: no Docker engine (b.Client may be
// nil). A test that runs a pinned program on this machine (etcd) gets it
// so.
func (b *Builder) Make(ctx context.Context, files ...File) ([]Artifact, error) {
	if err := os.MkdirAll(b.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("binary cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(b.CacheDir, "images.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]Artifact, 0, len(files))
	for _, f := range files {
		a, err := f.make(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Name, err)
		}
		out = append(out, a)
	}
	return out, nil
}
