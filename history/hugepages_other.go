//go:build !linux

package history

// adviseHuge does nothing where madvise(MADV_HUGEPAGE) is not available.
func adviseHuge([]Event) {}
