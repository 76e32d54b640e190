package redispy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/targets/redis/redispy"
)

// The example of docs/your-client.md is the adapter splitbrain ships: the
// file beside the doc is a link to it (one file, not a copy), and the
// code block in the doc is byte for byte the adapter.
func TestDocExampleIsTheAdapter(t *testing.T) {
	const example = "../../../docs/examples/my-client/my_lock.py"
	if link, err := os.Readlink(example); err != nil || filepath.Base(link) != "redis_py_lock.py" {
		t.Errorf("%s should be a link to redis_py_lock.py: %q, %v", example, link, err)
	}
	body, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, redispy.Source) {
		t.Error("docs/examples/my-client/my_lock.py does not read as redis_py_lock.py")
	}
	doc, err := os.ReadFile("../../../docs/your-client.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```python\n"+string(redispy.Source)+"```\n") {
		t.Error("docs/your-client.md's python block differs from redis_py_lock.py: paste it again")
	}
}
