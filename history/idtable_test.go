package history

import (
	"slices"
	"testing"
)

func TestIDTable(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		hi    int64
		dense bool
	}{
		{"run ids", 100, 100, true},
		{"ids from zero", 1, 0, true},
		{"ids far above their count", 10, 1 << 40, false},
		{"no ids", 0, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := NewIDTable[int32](tt.n, tt.hi)
			if got := tab.dense != nil; got != tt.dense {
				t.Fatalf("slice %v, want %v", got, tt.dense)
			}
			// Ids in the slice, past it, negative and huge all keep their
			// values, and setting zero removes one.
			var ids []int64
			for _, id := range []int64{0, 1, tt.hi, tt.hi + 1, -1, -1 << 40, 1 << 50} {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			for i, id := range ids {
				tab.Set(id, int32(i)+1)
			}
			for i, id := range ids {
				if got := tab.Get(id); got != int32(i)+1 {
					t.Errorf("Get(%d) = %d, want %d", id, got, i+1)
				}
			}
			if got := tab.Get(7); tt.hi != 7 && got != 0 {
				t.Errorf("Get(7) = %d, never set", got)
			}
			for _, id := range ids {
				tab.Set(id, 0)
				if got := tab.Get(id); got != 0 {
					t.Errorf("Get(%d) = %d after it was removed", id, got)
				}
			}
			if len(tab.sparse) != 0 {
				t.Errorf("%d ids left in the map after every one was removed", len(tab.sparse))
			}
		})
	}
}

func TestNewOpsIDTable(t *testing.T) {
	ops := []Op{{Invoke: &Event{ID: 3}}, {Invoke: &Event{ID: 9}}}
	tab := NewOpsIDTable[bool](ops)
	if len(tab.dense) != 10 {
		t.Errorf("slice of %d, want ids 0..9", len(tab.dense))
	}
}
