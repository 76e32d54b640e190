package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientFilesLinks(t *testing.T) {
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "lib.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		link    string // what my-client/link names; "" for no link
		want    []string
		wantErr string
	}{
		{name: "plain files", want: []string{"adapter.py"}},
		{name: "link to a file goes in as the file", link: filepath.Join(shared, "lib.py"), want: []string{"adapter.py", "link"}},
		{name: "link to a directory", link: shared, wantErr: "is a link to a directory; copy the directory in instead"},
		{name: "dangling link", link: filepath.Join(shared, "gone.py"), wantErr: "is a link to nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "adapter.py"), []byte("print()\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.link != "" {
				if err := os.Symlink(tc.link, filepath.Join(dir, "link")); err != nil {
					t.Fatal(err)
				}
			}
			files, err := clientFiles(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "--client-files ") {
					t.Fatalf("err = %v, want one line with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, filepath.Base(f.Dest))
				if filepath.Base(f.Dest) == "link" && f.Mode != 0o644 {
					t.Errorf("a linked file keeps its target's mode: %o", f.Mode)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("files = %v, want %v", got, tc.want)
			}
		})
	}
}
