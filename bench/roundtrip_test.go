package bench

import (
	"testing"
	"time"
)

// TestRoundTripOutlastingWindow: a warm-up round trip that ends after the
// whole window (a loaded host) leaves the next one timed, not an empty point.
func TestRoundTripOutlastingWindow(t *testing.T) {
	calls := 0
	lat, err := timeRoundTrips(t.Context(), time.Millisecond, 5*time.Millisecond, func() error {
		calls++
		if calls == 1 {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	if err != nil || lat.N == 0 {
		t.Fatalf("got %+v, %v after %d round trips; want at least one timed", lat, err, calls)
	}
}
