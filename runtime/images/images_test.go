package images

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, rel, body string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTreeHash(t *testing.T) {
	root := t.TempDir()
	write(t, root, "go.mod", "module "+ModulePath+"\n")
	write(t, root, "a/a.go", "package a")
	h0, err := TreeHash(root)
	if err != nil {
		t.Fatal(err)
	}
	ignored := []string{"a/a_test.go", "README.md", "docs/x.go", "results/r.go", "a/testdata/t.go", ".git/HEAD", "sub/go.mod", "sub/s.go"}
	for _, rel := range ignored {
		write(t, root, rel, "whatever")
		if h, _ := TreeHash(root); h != h0 {
			t.Fatalf("adding %s changed the hash", rel)
		}
	}
	for _, rel := range []string{"a/a.go", "a/shim.c", "go.sum", "a/page.html"} {
		write(t, root, rel, "changed "+rel)
		h, _ := TreeHash(root)
		if h == h0 {
			t.Fatalf("changing %s kept the hash", rel)
		}
		h0 = h
	}
	if got, ok := FindSource(filepath.Join(root, "a", "testdata")); !ok || got != root {
		t.Fatalf("FindSource = %q %v", got, ok)
	}
	if _, ok := FindSource(t.TempDir()); ok {
		t.Fatal("found a source tree where there is none")
	}
}

func TestBaseTagIsStable(t *testing.T) {
	a := BaseTag()
	if a != BaseTag() || len(a) != len("splitbrain-base:")+12 {
		t.Fatalf("base tag %q", a)
	}
	saved := Packages
	defer func() { Packages = saved }()
	Packages = append(append([]string(nil), saved...), "cowsay")
	if BaseTag() == a {
		t.Fatal("changing the package list kept the base tag")
	}
}

func TestIsStatic(t *testing.T) {
	if isStatic("/bin/sh") {
		t.Fatal("/bin/sh reported static")
	}
	if isStatic(filepath.Join(t.TempDir(), "missing")) {
		t.Fatal("missing file reported static")
	}
}
