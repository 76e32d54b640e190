package setnx

import "time"

// SetClock sets l's wall clock (a client whose clock runs ahead).
func SetClock(l *Locker, now func() time.Time) { l.now = now }
