// Package catalog imports, for their registrations, every backend, lock
// client and fault splitbrain ships (the shape of database/sql drivers): a
// program that imports catalog knows them all, and adding one is its
// package plus one line here.
//
// The faults pause, kill and partition register from package nemesis
// itself, which every program that runs faults imports.
package catalog

import (
	// Faults.
	_ "github.com/splitbrain/splitbrain/nemesis/clock"
)
