package redispy_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/targets/redis/redispy"
)

// The example of docs/your-client.md is the adapter splitbrain ships: the
// file beside the doc and the code block in it are byte for byte the
// adapter.
func TestDocExampleIsTheAdapter(t *testing.T) {
	example, err := os.ReadFile("../../../docs/examples/my-client/my_lock.py")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(example, redispy.Source) {
		t.Error("docs/examples/my-client/my_lock.py differs from redis_py_lock.py: copy it again")
	}
	doc, err := os.ReadFile("../../../docs/your-client.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```python\n"+string(redispy.Source)+"```\n") {
		t.Error("docs/your-client.md's python block differs from redis_py_lock.py: paste it again")
	}
}
