package wire

import (
	"strconv"
	"time"
)

// AETH syndrome layout (IBTA vol 1 §9.7.5.1, rxe_hdr.h enum aeth_syndrome):
// bits 7:5 are the type, bits 4:0 a credit count code (ACK), an RNR timer
// code (RNR NAK) or a NAK code (NAK).
const (
	SyndromeTypeMask  = 0xe0
	SyndromeValueMask = 0x1f
	SyndromeACK       = 0x00
	SyndromeRNRNAK    = 0x20
	SyndromeReserved  = 0x40
	SyndromeNAK       = 0x60
	// CreditInvalid is the ACK credit code meaning "no credit limit"; rxe
	// always sends it (syndrome 0x1F).
	CreditInvalid = 0x1f
)

// NAKCode is the low 5 bits of a NAK syndrome.
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError       NAKCode = 0 // syndrome 0x60: carries the expected PSN
	NAKInvalidRequest         NAKCode = 1 // 0x61
	NAKRemoteAccessError      NAKCode = 2 // 0x62
	NAKRemoteOperationalError NAKCode = 3 // 0x63
	NAKInvalidRDRequest       NAKCode = 4 // 0x64 (RD only)
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "NAKCode(" + strconv.Itoa(int(c)) + ")"
}

// IsACK reports whether the syndrome is a positive acknowledgement.
func (a AETH) IsACK() bool { return a.Syndrome&SyndromeTypeMask == SyndromeACK }

// IsRNRNAK reports whether the syndrome is a receiver-not-ready NAK.
func (a AETH) IsRNRNAK() bool { return a.Syndrome&SyndromeTypeMask == SyndromeRNRNAK }

// IsNAK reports whether the syndrome is a NAK (not an RNR NAK).
func (a AETH) IsNAK() bool { return a.Syndrome&SyndromeTypeMask == SyndromeNAK }

// IsReserved reports whether the syndrome type is the reserved 0x40 class
// (rxe treats it as an error).
func (a AETH) IsReserved() bool { return a.Syndrome&SyndromeTypeMask == SyndromeReserved }

// NAKCode returns the NAK code; meaningful only if IsNAK.
func (a AETH) NAKCode() NAKCode { return NAKCode(a.Syndrome & SyndromeValueMask) }

// RNRTimer returns the minimum wait an RNR NAK asks for; meaningful only if
// IsRNRNAK.
func (a AETH) RNRTimer() time.Duration { return RNRTimeout(a.Syndrome) }

// Credits returns the credit count of an ACK. limited is false for
// CreditInvalid (no limit). Meaningful only if IsACK.
func (a AETH) Credits() (credits int, limited bool) { return CreditCount(a.Syndrome) }

// ACKSyndrome returns the ACK syndrome for a credit code (CreditInvalid for
// "unlimited", as rxe sends).
func ACKSyndrome(creditCode uint8) uint8 { return SyndromeACK | creditCode&SyndromeValueMask }

// RNRNAKSyndrome returns the RNR NAK syndrome for an RNR timer code; rxe uses
// the responder QP's min_rnr_timer.
func RNRNAKSyndrome(timerCode uint8) uint8 { return SyndromeRNRNAK | timerCode&SyndromeValueMask }

// NAKSyndrome returns the NAK syndrome for a NAK code.
func NAKSyndrome(c NAKCode) uint8 { return SyndromeNAK | uint8(c)&SyndromeValueMask }

// creditTable maps ACK credit codes 0..30 to credit counts (IBTA Table 45;
// rdmavt credit_table).
var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount decodes the low 5 bits of code into a credit count; limited is
// false for CreditInvalid.
func CreditCount(code uint8) (credits int, limited bool) {
	c := code & SyndromeValueMask
	if c == CreditInvalid {
		return 0, false
	}
	return int(creditTable[c]), true
}

// CreditCode returns the largest credit code whose count does not exceed n
// (the encoding rdmavt uses); negative n gives code 0.
func CreditCode(n int) uint8 {
	code := uint8(0)
	for c, v := range creditTable {
		if int(v) <= n {
			code = uint8(c)
		}
	}
	return code
}

// rnrTimeouts maps RNR timer codes to durations (IBTA Table 46; enum
// ib_rnr_timeout). Code 0 is the longest. rxe's own table has 61.41 ms for
// code 25, a typo; the IBTA value is used here.
var rnrTimeouts = [32]time.Duration{
	655360 * time.Microsecond,
	10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond, 40 * time.Microsecond,
	60 * time.Microsecond, 80 * time.Microsecond, 120 * time.Microsecond, 160 * time.Microsecond,
	240 * time.Microsecond, 320 * time.Microsecond, 480 * time.Microsecond, 640 * time.Microsecond,
	960 * time.Microsecond, 1280 * time.Microsecond, 1920 * time.Microsecond, 2560 * time.Microsecond,
	3840 * time.Microsecond, 5120 * time.Microsecond, 7680 * time.Microsecond, 10240 * time.Microsecond,
	15360 * time.Microsecond, 20480 * time.Microsecond, 30720 * time.Microsecond, 40960 * time.Microsecond,
	61440 * time.Microsecond, 81920 * time.Microsecond, 122880 * time.Microsecond, 163840 * time.Microsecond,
	245760 * time.Microsecond, 327680 * time.Microsecond, 491520 * time.Microsecond,
}

// RNRTimeout returns the duration of an RNR timer code (low 5 bits of code).
func RNRTimeout(code uint8) time.Duration { return rnrTimeouts[code&SyndromeValueMask] }

// RNRTimerCode returns the code of the shortest RNR timeout that is at least
// d; durations above 655.36 ms give code 0 (the longest).
func RNRTimerCode(d time.Duration) uint8 {
	for c := 1; c < len(rnrTimeouts); c++ {
		if rnrTimeouts[c] >= d {
			return uint8(c)
		}
	}
	return 0
}

// ResponseKind is one kind of RC response a requester can receive: its
// opcode and, for those that carry an AETH, the syndrome.
type ResponseKind struct {
	Opcode   Opcode
	Syndrome uint8
}

// ResponseKinds lists every kind of RC response: the ACK, a NAK of each
// code, an RNR NAK, each READ response packet and the atomic ACK. Tests
// and the spoofer forge them all.
func ResponseKinds() []ResponseKind {
	return []ResponseKind{
		{RCAck, ACKSyndrome(31)},
		{RCAck, NAKSyndrome(NAKPSNSequenceError)},
		{RCAck, NAKSyndrome(NAKInvalidRequest)},
		{RCAck, NAKSyndrome(NAKRemoteAccessError)},
		{RCAck, NAKSyndrome(NAKRemoteOperationalError)},
		{RCAck, NAKSyndrome(NAKInvalidRDRequest)},
		{RCAck, RNRNAKSyndrome(1)},
		{RCReadResponseFirst, ACKSyndrome(31)},
		{RCReadResponseMiddle, 0},
		{RCReadResponseLast, ACKSyndrome(31)},
		{RCReadResponseOnly, ACKSyndrome(31)},
		{RCAtomicAck, ACKSyndrome(31)},
	}
}
