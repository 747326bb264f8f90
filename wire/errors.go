package wire

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them, so callers can classify drops with errors.Is. The wrapping errors are
// preallocated package values (one per failure site), which keeps the decode
// and encode paths allocation-free while still saying which header was wrong.
var (
	// ErrTruncated: the frame ends before a header or field it must contain.
	ErrTruncated = errors.New("wire: truncated packet")
	// ErrSplitHeaders: DecodeSplit needs every header in the first piece;
	// gather the frame and Decode it instead.
	ErrSplitHeaders = errors.New("wire: headers split across pieces")
	// ErrNotRoCE: the frame is not an IPv4/IPv6 UDP datagram to port 4791.
	ErrNotRoCE = errors.New("wire: not a RoCEv2 packet")
	// ErrIPOptions: the IPv4 header carries options (IHL > 5); rxe's ICRC
	// code assumes a 20-byte header, so such packets cannot be RoCEv2.
	ErrIPOptions = errors.New("wire: IPv4 options are not supported")
	// ErrBadIPHeader: malformed IP header (version, IHL < 5, total length,
	// checksum, fragmentation, TTL/hop limit 0).
	ErrBadIPHeader = errors.New("wire: bad IP header")
	// ErrBadUDPLength: the UDP length disagrees with the IP length.
	ErrBadUDPLength = errors.New("wire: bad UDP length")
	// ErrBadTVer: the BTH transport header version is not 0.
	ErrBadTVer = errors.New("wire: bad BTH transport version")
	// ErrUnknownOpcode: the BTH opcode is not an RC, UC, UD or CNP opcode
	// this package knows.
	ErrUnknownOpcode = errors.New("wire: unknown opcode")
	// ErrBadPad: PadCnt exceeds the bytes after the headers, or a pad byte
	// is not zero.
	ErrBadPad = errors.New("wire: bad pad")
	// ErrBadLength: lengths are inconsistent (UDP payload not a multiple of
	// 4, payload on an opcode that carries none, packet too long, ...).
	ErrBadLength = errors.New("wire: bad length")
	// ErrBadICRC: the invariant CRC does not match.
	ErrBadICRC = errors.New("wire: bad ICRC")
	// ErrReserved: a reserved area that must be zero (CNP) is not.
	ErrReserved = errors.New("wire: reserved field is not zero")
	// ErrInvalidField: Encode was given a field value that does not fit its
	// wire width or is never valid on the wire.
	ErrInvalidField = errors.New("wire: invalid field value")
	// ErrShortBuffer: the destination buffer is too small for the frame.
	ErrShortBuffer = errors.New("wire: buffer too short")
)

// wireError is a preallocated, descriptive error that wraps a sentinel.
type wireError struct {
	kind error
	msg  string
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.kind }

func newError(kind error, msg string) error {
	return &wireError{kind: kind, msg: "wire: " + msg}
}

// Decode failures.
var (
	errEthTruncated     = newError(ErrTruncated, "frame shorter than the Ethernet header")
	errVLANTruncated    = newError(ErrTruncated, "frame shorter than the 802.1Q tag")
	errNotIP            = newError(ErrNotRoCE, "EtherType is neither IPv4 nor IPv6")
	errIPv4Truncated    = newError(ErrTruncated, "frame shorter than the IPv4 header")
	errIPv4Version      = newError(ErrBadIPHeader, "IPv4 EtherType but IP version is not 4")
	errIPv4IHL          = newError(ErrBadIPHeader, "IPv4 IHL below 5")
	errIPv4Options      = newError(ErrIPOptions, "IPv4 header has options (IHL above 5)")
	errNotUDPv4         = newError(ErrNotRoCE, "IPv4 protocol is not UDP")
	errIPv4TotalLen     = newError(ErrBadIPHeader, "IPv4 total length shorter than the header")
	errIPv4BeyondFrame  = newError(ErrTruncated, "IPv4 total length exceeds the frame")
	errIPv4Checksum     = newError(ErrBadIPHeader, "IPv4 header checksum mismatch")
	errIPv4Fragment     = newError(ErrBadIPHeader, "IPv4 fragment (MF set or fragment offset non-zero)")
	errIPv4EvilBit      = newError(ErrBadIPHeader, "IPv4 reserved flag bit set")
	errIPv4TTL          = newError(ErrBadIPHeader, "IPv4 TTL is 0")
	errIPv6Truncated    = newError(ErrTruncated, "frame shorter than the IPv6 header")
	errIPv6Version      = newError(ErrBadIPHeader, "IPv6 EtherType but IP version is not 6")
	errNotUDPv6         = newError(ErrNotRoCE, "IPv6 next header is not UDP")
	errIPv6BeyondFrame  = newError(ErrTruncated, "IPv6 payload length exceeds the frame")
	errIPv6HopLimit     = newError(ErrBadIPHeader, "IPv6 hop limit is 0")
	errUDPTruncated     = newError(ErrTruncated, "IP payload shorter than the UDP header")
	errNotRoCEPort      = newError(ErrNotRoCE, "UDP destination port is not 4791")
	errUDPLength        = newError(ErrBadUDPLength, "UDP length differs from the IP payload length")
	errBTHTruncated     = newError(ErrTruncated, "UDP payload shorter than BTH + ICRC")
	errSplitHeaders     = newError(ErrSplitHeaders, "the headers continue into the frame's second piece")
	errUnaligned        = newError(ErrBadLength, "UDP payload length is not a multiple of 4")
	errICRC             = newError(ErrBadICRC, "ICRC mismatch")
	errTVer             = newError(ErrBadTVer, "BTH TVer is not 0")
	errUnknownOpcode    = newError(ErrUnknownOpcode, "unknown BTH opcode")
	errHeadersTruncated = newError(ErrTruncated, "UDP payload shorter than the opcode's transport headers")
	errPadTooBig        = newError(ErrBadPad, "PadCnt exceeds the bytes after the headers")
	errPadNonZero       = newError(ErrBadPad, "pad byte is not zero")
	errNoPayloadAllowed = newError(ErrBadLength, "payload on an opcode that carries none")
	errCNPReserved      = newError(ErrReserved, "CNP reserved bytes are not zero")
)

// Encode and ICRC/Seal failures.
var (
	errEncUnknownOpcode = newError(ErrUnknownOpcode, "cannot encode an unknown opcode")
	errEncNegPayload    = newError(ErrBadLength, "negative payload length")
	errEncNoPayload     = newError(ErrBadLength, "opcode carries no payload")
	errEncTooLong       = newError(ErrBadLength, "packet exceeds the IP length limit")
	errEncShort         = newError(ErrShortBuffer, "destination shorter than the frame")
	errEncTTL           = newError(ErrInvalidField, "IP TTL/hop limit 0")
	errEncAddr4         = newError(ErrInvalidField, "IPv4 packet needs IPv4 source and destination addresses")
	errEncAddr6         = newError(ErrInvalidField, "IPv6 packet needs IPv6 source and destination addresses")
	errEncFlowLabel     = newError(ErrInvalidField, "IPv6 flow label exceeds 20 bits")
	errEncDstPort       = newError(ErrInvalidField, "UDP destination port must be 4791 (or 0 for 4791)")
	errEncDestQP        = newError(ErrInvalidField, "BTH DestQP exceeds 24 bits")
	errEncPSN           = newError(ErrInvalidField, "BTH PSN exceeds 24 bits")
	errEncTVer          = newError(ErrInvalidField, "BTH TVer exceeds 4 bits")
	errEncResv6a        = newError(ErrInvalidField, "BTH Resv6a exceeds 6 bits")
	errEncResv7         = newError(ErrInvalidField, "BTH Resv7 exceeds 7 bits")
	errEncMSN           = newError(ErrInvalidField, "AETH MSN exceeds 24 bits")
	errEncSrcQP         = newError(ErrInvalidField, "DETH SrcQP exceeds 24 bits")
	errSealLayout       = newError(ErrBadLength, "header/payload lengths do not match the frame's IP and UDP lengths")
	errSealPadCnt       = newError(ErrBadPad, "BTH PadCnt does not match the payload length")
)
