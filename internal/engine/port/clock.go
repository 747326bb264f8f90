package port

import "time"

// Clock tells the engine the time; tests inject a fake one
// (internal/faketime).
type Clock interface {
	Now() time.Time
}
