package verbs

import (
	"time"

	"github.com/xdproce/xdproce/link"
)

// Link is the network a Device runs over (see package link).
type Link = link.Link

// Clock tells the engine the time; tests inject a fake one
// (internal/faketime).
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
