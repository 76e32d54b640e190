package history

// IDTable maps int64 ids (operation ids, the write tags that name them,
// processes) to values, the zero value meaning absent. A run numbers its
// operations from 1 and its processes from 0, so a slice indexes them (a
// map of a million operations costs seconds); ids outside the slice, and
// every id of a table sized for ids far above their count, go to a map.
type IDTable[V comparable] struct {
	dense  []V
	sparse map[int64]V
}

// NewIDTable returns a table for n ids up to hi: a slice unless hi is far
// above n.
func NewIDTable[V comparable](n int, hi int64) *IDTable[V] {
	if hi >= 0 && hi <= int64(4*n+1024) {
		return &IDTable[V]{dense: make([]V, hi+1)}
	}
	return &IDTable[V]{sparse: make(map[int64]V, n)}
}

// NewOpsIDTable returns a table for the invocation ids of ops.
func NewOpsIDTable[V comparable](ops []Op) *IDTable[V] {
	var hi int64
	for i := range ops {
		hi = max(hi, ops[i].Invoke.ID)
	}
	return NewIDTable[V](len(ops), hi)
}

// Get returns id's value, or the zero value when it has none.
func (t *IDTable[V]) Get(id int64) V {
	if id >= 0 && id < int64(len(t.dense)) {
		return t.dense[id]
	}
	return t.sparse[id]
}

// Set sets id's value; the zero value removes it.
func (t *IDTable[V]) Set(id int64, v V) {
	if id >= 0 && id < int64(len(t.dense)) {
		t.dense[id] = v
		return
	}
	var zero V
	if v == zero {
		delete(t.sparse, id)
		return
	}
	if t.sparse == nil {
		t.sparse = map[int64]V{}
	}
	t.sparse[id] = v
}
