package transport

import "time"

// Clock tells the engine the time; tests inject a fake one
// (internal/faketime).
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
