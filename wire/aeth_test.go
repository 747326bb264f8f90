package wire

import (
	"testing"
	"time"
)

func TestSyndromeClassification(t *testing.T) {
	for s := range 256 {
		a := AETH{Syndrome: uint8(s)}
		ack, rnr, nak, resv := a.IsACK(), a.IsRNRNAK(), a.IsNAK(), a.IsReserved()
		// The type is bits 7:5 (rxe masks with 0xe0), so 0x80-0xff is none.
		want := [4]bool{s < 0x20, s >= 0x20 && s < 0x40, s >= 0x60 && s < 0x80, s >= 0x40 && s < 0x60}
		if s >= 0x80 {
			want = [4]bool{}
		}
		if [4]bool{ack, rnr, nak, resv} != want {
			t.Errorf("syndrome %#02x: ack %v rnr %v nak %v resv %v", s, ack, rnr, nak, resv)
		}
	}
	for _, tc := range []struct {
		syn  uint8
		code NAKCode
		name string
	}{
		{0x60, NAKPSNSequenceError, "PSN sequence error"},
		{0x61, NAKInvalidRequest, "invalid request"},
		{0x62, NAKRemoteAccessError, "remote access error"},
		{0x63, NAKRemoteOperationalError, "remote operational error"},
		{0x64, NAKInvalidRDRequest, "invalid RD request"},
		{0x65, 5, "NAKCode(5)"},
	} {
		a := AETH{Syndrome: tc.syn}
		if !a.IsNAK() || a.NAKCode() != tc.code || a.NAKCode().String() != tc.name || NAKSyndrome(tc.code) != tc.syn {
			t.Errorf("%#02x: code %v", tc.syn, a.NAKCode())
		}
	}
	if ACKSyndrome(CreditInvalid) != 0x1f || RNRNAKSyndrome(12) != 0x2c || RNRNAKSyndrome(31) != 0x3f || NAKSyndrome(NAKRemoteAccessError) != 0x62 {
		t.Error("syndrome constructors")
	}
}

func TestCredits(t *testing.T) {
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
		1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for code, n := range want {
		got, limited := AETH{Syndrome: ACKSyndrome(uint8(code))}.Credits()
		if got != n || !limited {
			t.Errorf("credit code %#x: %d %v, want %d", code, got, limited, n)
		}
		if c := CreditCode(n); int(c) != code {
			t.Errorf("CreditCode(%d) = %d, want %d", n, c, code)
		}
		if code > 0 && n-1 != want[code-1] {
			if c := CreditCode(n - 1); int(c) != code-1 {
				t.Errorf("CreditCode(%d) = %d, want %d (round down)", n-1, c, code-1)
			}
		}
	}
	if _, limited := (AETH{Syndrome: 0x1f}).Credits(); limited {
		t.Error("0x1F is unlimited")
	}
	if CreditCode(-5) != 0 || CreditCode(1<<20) != 0x1e {
		t.Error("CreditCode bounds")
	}
}

func TestRNRTimer(t *testing.T) {
	ms := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28,
		1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76,
		327.68, 491.52}
	for code, v := range ms {
		want := time.Duration(v*1000+0.5) * time.Microsecond
		if got := (AETH{Syndrome: RNRNAKSyndrome(uint8(code))}).RNRTimer(); got != want {
			t.Errorf("RNR code %d: %v, want %v", code, got, want)
		}
		if c := RNRTimerCode(want); int(c) != code {
			t.Errorf("RNRTimerCode(%v) = %d, want %d", want, c, code)
		}
	}
	if RNRTimerCode(0) != 1 || RNRTimerCode(11*time.Microsecond) != 2 || RNRTimerCode(time.Second) != 0 {
		t.Error("RNRTimerCode rounding")
	}
}
