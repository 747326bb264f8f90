package pcap

import (
	"bytes"
	"testing"
	"time"
)

func TestNGRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w, err := NewNGWriter(&b, 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123456789)
	frames := [][]byte{bytes.Repeat([]byte{1}, 61), bytes.Repeat([]byte{2}, 200), {3, 4, 5}}
	for i, f := range frames {
		if err := w.WritePacket(t0.Add(time.Duration(i)), f, i%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadNG(b.Bytes())
	if err != nil || len(got) != 3 {
		t.Fatalf("%d packets, %v", len(got), err)
	}
	for i, p := range got {
		want := frames[i]
		if len(want) > 100 {
			want = want[:100] // the snap length
		}
		if !bytes.Equal(p.Data, want) || p.Outbound != (i%2 == 1) || !p.Time.Equal(t0.Add(time.Duration(i))) {
			t.Errorf("packet %d: %+v", i, p)
		}
	}
	if b.Len()%4 != 0 {
		t.Errorf("capture of %d bytes: blocks are 32-bit aligned", b.Len())
	}
}
