package registry

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestOf(t *testing.T) {
	var r Of[int]
	if got := r.Names(); len(got) != 0 {
		t.Fatalf("empty registry names %v", got)
	}
	if _, err := r.Lookup("thing", "a"); err == nil || err.Error() != `unknown thing "a" (known: )` {
		t.Errorf("Lookup in an empty registry: %v", err)
	}
	for _, tt := range []struct {
		name string
		v    int
		want bool
	}{{"b", 2, true}, {"a", 1, true}, {"c", 3, true}, {"b", 20, false}} {
		if got := r.Add(tt.name, tt.v); got != tt.want {
			t.Errorf("Add(%q, %d) = %v, want %v", tt.name, tt.v, got, tt.want)
		}
	}
	if got, want := r.Names(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got, want := r.All(), []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("All() = %v, want %v (by name; a taken name keeps its first value)", got, want)
	}
	if v, ok := r.Get("b"); !ok || v != 2 {
		t.Errorf("Get(b) = %d, %v", v, ok)
	}
	if v, err := r.Lookup("thing", "c"); err != nil || v != 3 {
		t.Errorf("Lookup(c) = %d, %v", v, err)
	}
	_, err := r.Lookup("thing", "z")
	if err == nil || !strings.Contains(err.Error(), `unknown thing "z" (known: a, b, c)`) {
		t.Errorf("Lookup(z): %v", err)
	}
}

func TestOfConcurrent(t *testing.T) {
	var r Of[int]
	var wg sync.WaitGroup
	added := make([]bool, 50)
	for i := range added {
		wg.Add(1)
		go func() {
			defer wg.Done()
			added[i] = r.Add("same", i)
			r.Names()
		}()
	}
	wg.Wait()
	if n := len(slices.DeleteFunc(added, func(b bool) bool { return !b })); n != 1 {
		t.Errorf("%d of 50 concurrent Adds of one name succeeded, want 1", n)
	}
}
