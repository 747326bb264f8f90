package daemon

import (
	"os"
	"testing"
	"time"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/verbs"
)

// sessionOf waits for the daemon's one session and returns it.
func sessionOf(t *testing.T, tb *testbed) *session {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s := tb.srv.snapshot(); len(s) == 1 {
			return s[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, want 1", tb.srv.Clients())
		}
		time.Sleep(time.Millisecond)
	}
}

// ahHandles lists the client's address handles as the session holds them.
func ahHandles(ss *session) map[uint32]*verbs.AddressHandle {
	out := map[uint32]*verbs.AddressHandle{}
	ss.ahs.Range(func(h, a any) bool {
		out[h.(uint32)] = a.(sharedAH).ah
		return true
	})
	return out
}

// The engines' lookup of a UD send slot's address handle finds the
// client's handles and nothing else: not a handle it never had, not one it
// destroyed, none once it is gone.
func TestAddressHandleLookup(t *testing.T) {
	tb := newTestbed(t)
	c := tb.dial(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	var ahs []*verbs.AddressHandle
	for range 3 {
		ah, err := pd.CreateAH(verbs.AH{DGID: ipB})
		if err != nil {
			t.Fatal(err)
		}
		ahs = append(ahs, ah)
	}
	ss := sessionOf(t, tb)
	held := ahHandles(ss)
	if len(held) != 3 {
		t.Fatalf("the session holds %d address handles, want 3", len(held))
	}
	for h, ah := range held {
		if got := ss.addressHandle(h); got != ah || got == nil {
			t.Fatalf("handle %d: %p, want %p", h, got, ah)
		}
	}
	for _, h := range []uint32{0, 1 << 31, ^uint32(0)} {
		if got := ss.addressHandle(h); got != nil {
			t.Fatalf("handle %d the client never had: %p", h, got)
		}
	}
	if err := pd.Dealloc(); err == nil {
		t.Fatal("DEALLOC_PD with address handles succeeded")
	}
	for _, ah := range ahs {
		if err := ah.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	for h := range held { // each DESTROY_AH was answered: the daemon is done with it
		if got := ss.addressHandle(h); got != nil {
			t.Fatalf("destroyed handle %d: %p", h, got)
		}
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	pd, err = c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateAH(verbs.AH{DGID: ipB}); err != nil {
		t.Fatal(err)
	}
	held = ahHandles(ss)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for tb.srv.Clients() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for h := range held {
		if got := ss.addressHandle(h); got != nil {
			t.Fatalf("handle %d of a departed client: %p", h, got)
		}
	}
	if n := tb.a.AddressHandles(); n != 0 {
		t.Fatalf("%d address handles left after the client detached", n)
	}
}

// BenchmarkAddressHandle is the lookup the engines make for every UD send
// slot, from every engine at once (RunParallel), of a handle the client
// has and of one it lacks. With a read-locked map the engines contended
// for the lock's count (2 CPUs: ~100 ns a lookup; sync.Map: ~8).
func BenchmarkAddressHandle(b *testing.B) {
	ss := newSession(&Server{}, nil, ipc.Peer{PID: os.Getpid()})
	const n = 64
	for i := range n {
		ss.ahs.Store(uint32(1000+i), sharedAH{ah: &verbs.AddressHandle{}, pd: 1})
	}
	b.Run("present", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := uint32(0); pb.Next(); i++ {
				if ss.addressHandle(1000+i%n) == nil {
					b.Fatal("no handle")
				}
			}
		})
	})
	b.Run("absent", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := uint32(0); pb.Next(); i++ {
				if ss.addressHandle(5000+i%n) != nil {
					b.Fatal("a handle the client lacks")
				}
			}
		})
	})
}
