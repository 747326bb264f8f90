package queue

import (
	"testing"

	"github.com/xdproce/xdproce/internal/ibv"
)

// TestLossWindowArithmetic: a loss halves the window once per window of
// packets, never below minWindow; acknowledged PSNs open it again.
func TestLossWindowArithmetic(t *testing.T) {
	var q Transport
	if q.Window() != ibv.MaxUnackedPSNs {
		t.Fatalf("window %d before any loss, want %d", q.Window(), ibv.MaxUnackedPSNs)
	}
	q.CompPSN, q.SentEnd = 100, 228
	q.ShrinkWindow()
	q.ShrinkWindow() // a second loss among the packets already in flight: same episode
	if q.Window() != ibv.MaxUnackedPSNs/2 {
		t.Fatalf("window %d after one episode, want %d", q.Window(), ibv.MaxUnackedPSNs/2)
	}
	q.GrowWindow(63)
	if q.Window() != 64 {
		t.Fatalf("window %d after 63 acknowledged PSNs, want 64", q.Window())
	}
	q.GrowWindow(1)
	if q.Window() != 64+windowGrowth {
		t.Fatalf("window %d after a window's worth acknowledged, want %d", q.Window(), 64+windowGrowth)
	}
	for range 10 {
		q.CompPSN = q.recoverPSN // the episode's packets are all acknowledged
		q.SentEnd = q.CompPSN + q.Window()
		q.ShrinkWindow()
	}
	if q.Window() != minWindow {
		t.Fatalf("window %d after many episodes, want the floor %d", q.Window(), minWindow)
	}
	q.GrowWindow(1 << 20)
	if q.Window() != ibv.MaxUnackedPSNs {
		t.Fatalf("window %d after a long loss-free run, want %d", q.Window(), ibv.MaxUnackedPSNs)
	}
}
