package verbs

import (
	"testing"

	"github.com/xdproce/xdproce/ring"
)

// busyQueue always has frames waiting and counts what it hands out.
type busyQueue struct{ taken int }

func (q *busyQueue) Receive(pkts []ring.Packet) int { q.taken += len(pkts); return len(pkts) }
func (q *busyQueue) Release([]ring.Packet) error    { return nil }
func (q *busyQueue) Refill() (int, error)           { return 0, nil }

// TestReceiveReadsQueuesFairly: with every queue busy enough to fill a
// batch on its own, successive batches start at successive queues, so each
// queue gets its share instead of queue 0 taking every batch.
func TestReceiveReadsQueuesFairly(t *testing.T) {
	qs := []*busyQueue{{}, {}, {}}
	l := &xskLink{pkts: make([]ring.Packet, rxBatch)}
	for _, q := range qs {
		l.rx = append(l.rx, q)
	}
	const batches = 30
	for range batches {
		if n, err := l.Receive(rxBatch, func([]byte) {}); err != nil || n != rxBatch {
			t.Fatalf("Receive: %d frames, %v", n, err)
		}
	}
	for i, q := range qs {
		if want := batches / len(qs) * rxBatch; q.taken != want {
			t.Errorf("queue %d: %d frames of %d, want %d", i, q.taken, batches*rxBatch, want)
		}
	}
}
