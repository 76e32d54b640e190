package server

import "time"

// Clock tells the time lease deadlines are measured on. Only differences
// between readings matter, so an implementation should return times that
// carry a monotonic reading, as time.Now does.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// systemClock is the process's monotonic clock.
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }
