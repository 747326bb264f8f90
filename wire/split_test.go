package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// checkSplit decodes frame whole and split at k, and requires the two to
// agree: the same error (or ErrSplitHeaders when a header crosses k), and
// otherwise the same packet, the two payload pieces joined being the
// whole's payload.
func checkSplit(t *testing.T, frame []byte, k int) {
	t.Helper()
	var whole, split Packet
	werr := Decode(frame, &whole)
	serr := DecodeSplit(frame[:k], frame[k:], &split)
	if errors.Is(serr, ErrSplitHeaders) {
		return // the caller gathers and decodes whole
	}
	ws, _ := sentinelOf(werr)
	ss, _ := sentinelOf(serr)
	if (werr == nil) != (serr == nil) || werr != nil && ws != ss {
		t.Fatalf("split at %d of %d: whole %v, split %v", k, len(frame), werr, serr)
	}
	if werr != nil {
		return
	}
	joined := append(append([]byte(nil), split.Payload...), split.PayloadTail...)
	if !bytes.Equal(joined, whole.Payload) {
		t.Fatalf("split at %d: payload %d+%d bytes differs from the whole's %d", k, len(split.Payload), len(split.PayloadTail), len(whole.Payload))
	}
	split.Payload, split.PayloadTail, whole.Payload = nil, nil, nil
	if !reflect.DeepEqual(split, whole) {
		t.Fatalf("split at %d: %+v, whole %+v", k, split, whole)
	}
}

// TestDecodeSplitAgreesWithDecode splits every test vector at every offset.
func TestDecodeSplitAgreesWithDecode(t *testing.T) {
	for _, v := range docVectors {
		frame := hexDump(t, v.dump)
		for k := 1; k < len(frame); k++ {
			checkSplit(t, frame, k)
		}
	}
}

// FuzzDecodeSplit: any frame, split anywhere, decodes as it does whole.
func FuzzDecodeSplit(f *testing.F) {
	for _, v := range docVectors {
		f.Add(hexDump(f, v.dump), uint16(len(v.dump)/4))
	}
	f.Fuzz(func(t *testing.T, frame []byte, k uint16) {
		if len(frame) < 2 {
			return
		}
		fixed := append([]byte(nil), frame...)
		repair(fixed)
		for _, fr := range [][]byte{frame, fixed} {
			checkSplit(t, fr, 1+int(k)%(len(fr)-1))
		}
	})
}
