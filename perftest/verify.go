package perftest

import (
	"fmt"
	"math/rand/v2"
)

// patternAt is the byte Verify puts at offset o of a slot: never zero, so
// a byte nobody wrote (the receiving memory starts zeroed) cannot pass, and
// with a period (251, prime) that no power-of-two stride aliases.
func patternAt(o int) byte { return byte(o%251) + 1 }

// copyPattern fills b as the slot bytes from offset off on.
func copyPattern(b []byte, off int) {
	for i := range b {
		b[i] = patternAt(off + i)
	}
}

// checkPattern reports the first byte of b that is not the pattern of the
// slot bytes from offset off on.
func checkPattern(b []byte, off int) error {
	for i, v := range b {
		if want := patternAt(off + i); v != want {
			return fmt.Errorf("data mismatch at slot offset %d: %#02x, want %#02x", off+i, v, want)
		}
	}
	return nil
}

// checkPatternRun reports whether b is a run of the pattern from any
// offset: a datagram whose sending position the receiver does not know.
func checkPatternRun(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if b[0] == 0 || b[0] > 251 {
		return fmt.Errorf("data mismatch: first byte %#02x is no pattern byte", b[0])
	}
	return checkPattern(b, int(b[0])-1)
}

// fill prepares the buffer as perftest does (random bytes; zeros for
// write_lat, whose receivers poll a byte), or, with Verify, for checking:
// the slots this side sends from hold the pattern, and so do the targets a
// peer READs; targets that receive data or atomics start zeroed.
func (s *session) fill() {
	b := s.mr.Bytes()
	c := &s.cfg
	if !c.Verify {
		if c.Tool == (Tool{Write, Lat}) {
			clear(b)
			return
		}
		for i := 0; i+8 <= len(b); i += 8 {
			v := rand.Uint64()
			for j := range 8 {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return
	}
	half := c.QPs * s.slot
	for q := range c.QPs {
		src := b[q*s.slot : (q+1)*s.slot]
		dst := b[half+q*s.slot : half+(q+1)*s.slot]
		copyPattern(src, 0)
		clear(dst)
		if c.Tool.Verb == Read {
			copyPattern(dst, 0)
			clear(src)
		}
		if c.Tool.Verb == Atomic {
			clear(src)
		}
	}
}

// positions is where the messages of one size land in a slot: consecutive
// strides of the cycle buffer, or offset 0 when a message fills half of it.
func (s *session) positions(size, iters int) []int {
	step := stride(size, s.line)
	if size > s.cycle/2 {
		return []int{0}
	}
	n := min(max(s.cycle/step, 1), iters)
	p := make([]int, n)
	for i := range p {
		p[i] = i * step
	}
	return p
}

// verifyTarget is the passive server's check after a WRITE or atomic
// bandwidth run: every message of the last size landed intact; for atomics,
// the counters add up to the client's requests.
func (s *session) verifyTarget() error {
	c := &s.cfg
	if !c.Verify || c.Tool.Verb == Read {
		return nil
	}
	b := s.mr.Bytes()
	half := c.QPs * s.slot
	size := c.sizes()[len(c.sizes())-1]
	for q := range c.QPs {
		slot := b[half+q*s.slot : half+(q+1)*s.slot]
		if c.Tool.Verb == Atomic {
			var sum uint64
			for _, o := range s.positions(8, c.Iters) {
				sum += le64(slot[o:])
			}
			want := uint64(c.Iters)
			if c.Atomic == CmpAndSwap {
				want = 0
			}
			if c.Duration == 0 && sum != want {
				return fmt.Errorf("perftest: QP %d: the atomic counters add up to %d, want %d", q, sum, want)
			}
			continue
		}
		for _, o := range s.positions(size, c.Iters) {
			if err := checkPattern(slot[o:o+size], o); err != nil {
				return fmt.Errorf("perftest: QP %d: %w", q, err)
			}
		}
	}
	fmt.Fprintf(s.out, " Data validation : every byte of the last size checked on %d QPs\n", c.QPs)
	return nil
}

// verifyLocalRead is the READ client's check: the responses of the last
// size brought the peer's pattern into every position.
func (s *session) verifyLocalRead(size int) error {
	c := &s.cfg
	if !c.Verify || c.Tool.Verb != Read {
		return nil
	}
	b := s.mr.Bytes()
	for q := range c.QPs {
		slot := b[q*s.slot : (q+1)*s.slot]
		for _, o := range s.positions(size, c.Iters) {
			if err := checkPattern(slot[o:o+size], o); err != nil {
				return fmt.Errorf("perftest: READ into QP %d's buffer: %w", q, err)
			}
		}
	}
	fmt.Fprintf(s.out, " Data validation : every byte READ of the last size checked on %d QPs\n", c.QPs)
	return nil
}
