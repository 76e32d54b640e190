package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReferenceUpToDate: the checked-in CLI reference (docs/cli) is what
// the commands generate now; a flag or command changed without
// regenerating it fails here, naming the command that regenerates it.
func TestReferenceUpToDate(t *testing.T) {
	fresh := t.TempDir()
	if err := writeReference(newRootCmd(&bytes.Buffer{}, &bytes.Buffer{}), fresh); err != nil {
		t.Fatal(err)
	}
	checked := filepath.Join("..", "..", referenceDir)
	names := func(dir string) []string {
		m, err := filepath.Glob(filepath.Join(dir, "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	want, got := names(fresh), names(checked)
	if !slices.Equal(want, got) {
		t.Fatalf("%s has pages %v, the commands make %v: the reference is stale; regenerate it with\n  %s", referenceDir, got, want, regenerateReference)
	}
	for _, n := range want {
		w, err := os.ReadFile(filepath.Join(fresh, n))
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(filepath.Join(checked, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w, g) {
			t.Errorf("%s/%s is stale; regenerate the reference with\n  %s", referenceDir, n, regenerateReference)
		}
	}
	// It is the reference of every visible command and flag: run's
	// timeouts and bypass writers, matrix's sets.
	run, err := os.ReadFile(filepath.Join(fresh, "splitbrain_run.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--acquire-timeout", "--op-timeout", "--bypass-clients", "--nodes-file", "--partitions"} {
		if !strings.Contains(string(run), flag) {
			t.Errorf("the run page lacks %s", flag)
		}
	}
}

// TestReferenceCommand: `splitbrain reference` writes the pages and man
// pages, and replaces the pages of a command that is gone.
func TestReferenceCommand(t *testing.T) {
	dir, man := t.TempDir(), t.TempDir()
	gone := filepath.Join(dir, "splitbrain_gone.md")
	if err := os.WriteFile(gone, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "reference", "--dir", dir, "--man", man)
	if code != 0 || !strings.Contains(out, "reference: "+dir) {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(gone); err == nil {
		t.Errorf("the page of a removed command is still there")
	}
	b, err := os.ReadFile(filepath.Join(man, "splitbrain-run.1"))
	if err != nil || !bytes.Contains(b, []byte("time-limit")) {
		t.Fatalf("man page of run: %v", err)
	}
}
