package history

import (
	"path/filepath"
	"testing"
)

// TestWriterObserve: observers see every event appended while they are
// registered, in order, beside OnAppend's view; removed, they see no more.
func TestWriterObserve(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "h.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var view, a, b []int64
	w.OnAppend(func(e Event) { view = append(view, e.ID) })
	removeA := w.Observe(func(e Event) { a = append(a, e.ID) })
	w.Observe(func(e Event) { b = append(b, e.ID) })
	for id := int64(1); id <= 3; id++ {
		if id == 3 {
			removeA()
		}
		if err := w.Append(Event{Type: Invoke, ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if len(view) != 3 || len(a) != 2 || len(b) != 3 || a[1] != 2 || b[2] != 3 {
		t.Fatalf("view %v, a %v, b %v", view, a, b)
	}
}
