package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"
)

type rec struct {
	sec, frac  uint32
	data       []byte
	origExtras uint32
}

// build writes a capture by hand, independently of the reader.
func build(o binary.ByteOrder, magic uint32, linkType uint32, recs []rec) []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, o, v) }
	w(magic)
	w(uint16(2))
	w(uint16(4))
	w(int32(0))
	w(uint32(0))
	w(uint32(262144))
	w(linkType)
	for _, r := range recs {
		w(r.sec)
		w(r.frac)
		w(uint32(len(r.data)))
		w(uint32(len(r.data)) + r.origExtras)
		b.Write(r.data)
	}
	return b.Bytes()
}

func TestByteOrdersAndResolution(t *testing.T) {
	recs := []rec{
		{sec: 1700000000, frac: 123456, data: []byte{1, 2, 3}},
		{sec: 1700000001, frac: 999, data: []byte{}, origExtras: 7},
		{sec: 1700000002, frac: 5, data: bytes.Repeat([]byte{0xab}, 70)},
	}
	for _, tc := range []struct {
		name  string
		order binary.ByteOrder
		magic uint32
		nano  bool
	}{
		{"little-micro", binary.LittleEndian, magicMicro, false},
		{"big-micro", binary.BigEndian, magicMicro, false},
		{"little-nano", binary.LittleEndian, magicNano, true},
		{"big-nano", binary.BigEndian, magicNano, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := build(tc.order, tc.magic, LinkTypeEthernet, recs)
			h, got, err := ReadAll(data)
			if err != nil {
				t.Fatal(err)
			}
			if h.ByteOrder != tc.order || h.Nanosecond != tc.nano || h.LinkType != LinkTypeEthernet ||
				h.VersionMajor != 2 || h.VersionMinor != 4 || h.SnapLen != 262144 || h.FCSLen != 0 {
				t.Fatalf("header %+v", h)
			}
			if len(got) != len(recs) {
				t.Fatalf("%d records, want %d", len(got), len(recs))
			}
			for i, r := range recs {
				unit := time.Microsecond
				if tc.nano {
					unit = time.Nanosecond
				}
				want := time.Unix(int64(r.sec), 0).Add(time.Duration(r.frac) * unit).UTC()
				if !got[i].Time.Equal(want) {
					t.Errorf("record %d time %v, want %v", i, got[i].Time, want)
				}
				if !bytes.Equal(got[i].Data, r.data) || got[i].OrigLen != len(r.data)+int(r.origExtras) {
					t.Errorf("record %d = %x/%d", i, got[i].Data, got[i].OrigLen)
				}
			}
		})
	}
}

func TestLinkTypeAndFCS(t *testing.T) {
	// LINKTYPE_RAW (101) with the F bit and 2 words (4 bytes) of FCS.
	data := build(binary.LittleEndian, magicMicro, 101|fcsPresentBit|2<<fcsLenShift, nil)
	r, err := NewReader(data)
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.LinkType != 101 || r.Header.FCSLen != 4 {
		t.Fatalf("header %+v", r.Header)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("empty capture: %v, want io.EOF", err)
	}
}

func TestMalformed(t *testing.T) {
	good := build(binary.LittleEndian, magicMicro, LinkTypeEthernet, []rec{{data: []byte{1, 2, 3, 4}}})
	badVersion := append([]byte(nil), good...)
	badVersion[4] = 3
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short global header", good[:23], ErrTruncated},
		{"pcapng", append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, good[4:]...), ErrNotPcap},
		{"version 3", badVersion, ErrNotPcap},
		{"short record header", good[:30], ErrTruncated},
		{"short record data", good[:len(good)-1], ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadAll(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}
