package transport

import (
	"testing"

	"github.com/xdproce/xdproce/internal/ibv"
)

// TestLossWindowArithmetic: a loss halves the window once per window of
// packets, never below minWindow; acknowledged PSNs open it again.
func TestLossWindowArithmetic(t *testing.T) {
	var q qpTransport
	if q.window() != ibv.MaxUnackedPSNs {
		t.Fatalf("window %d before any loss, want %d", q.window(), ibv.MaxUnackedPSNs)
	}
	q.compPSN, q.sentEnd = 100, 228
	q.shrinkWindow()
	q.shrinkWindow() // a second loss among the packets already in flight: same episode
	if q.window() != ibv.MaxUnackedPSNs/2 {
		t.Fatalf("window %d after one episode, want %d", q.window(), ibv.MaxUnackedPSNs/2)
	}
	q.growWindow(63)
	if q.window() != 64 {
		t.Fatalf("window %d after 63 acknowledged PSNs, want 64", q.window())
	}
	q.growWindow(1)
	if q.window() != 64+windowGrowth {
		t.Fatalf("window %d after a window's worth acknowledged, want %d", q.window(), 64+windowGrowth)
	}
	for range 10 {
		q.compPSN = q.recoverPSN // the episode's packets are all acknowledged
		q.sentEnd = q.compPSN + q.window()
		q.shrinkWindow()
	}
	if q.window() != minWindow {
		t.Fatalf("window %d after many episodes, want the floor %d", q.window(), minWindow)
	}
	q.growWindow(1 << 20)
	if q.window() != ibv.MaxUnackedPSNs {
		t.Fatalf("window %d after a long loss-free run, want %d", q.window(), ibv.MaxUnackedPSNs)
	}
}
