package uverbs

import (
	"fmt"
	"reflect"
	"syscall"
)

// Extensible parts, as the kernel's struct ib_uverbs_ex_* and copy_struct_from_user: a body's
// last part may be an extensible struct of fixed-size fields, to which fields are only ever
// appended. Each side sends as many of its bytes as it knows or was asked for; the reader takes
// the bytes it was sent, zeros for the fields the sender predates, and refuses only bytes past
// what it knows that are not zero (fields it cannot honour: E2BIG, as the kernel). HELLO's
// request is one (the client's version and how much of the reply's tail it understands), its
// reply's tail another, so a library and a daemon of different releases still greet each other.

// extensible marks the structs that are extensible parts.
type extensible interface{ extensible() }

func (Hello) extensible()         {}
func (DeviceInfoExt) extensible() {}

// ErrUnknownFields is what decoding an extensible part that carries nonzero bytes past the
// fields this side knows returns: a request this side cannot honour, E2BIG.
var ErrUnknownFields = fmt.Errorf("uverbs: nonzero fields past those this side knows: %w", syscall.E2BIG)

// ExtLen is the encoded size of extensible part v: all its fields.
func ExtLen(v extensible) int {
	e := &Encoder{}
	e.Put(v)
	return len(e.b)
}

// PutExt encodes extensible part v truncated to n bytes: the most the reader said it
// understands.
func (e *Encoder) PutExt(v extensible, n int) {
	t := &Encoder{}
	t.Put(v)
	e.b = append(e.b, t.b[:max(0, min(n, len(t.b)))]...)
}

// GetExt decodes the rest of the message into extensible part v (a pointer to one): zero for
// the fields the message stops before, ErrUnknownFields if it goes on past v's fields with a
// nonzero byte. It returns how many of the message's bytes were v's.
func (d *Decoder) GetExt(v extensible) int {
	rv := reflect.ValueOf(v)
	if d.err != nil {
		rv.Elem().SetZero()
		return 0
	}
	size := ExtLen(v)
	rest := d.b
	d.b = nil
	if len(rest) > size {
		for _, c := range rest[size:] {
			if c != 0 {
				d.err = ErrUnknownFields
				rv.Elem().SetZero()
				return 0
			}
		}
		rest = rest[:size]
	}
	buf := make([]byte, size)
	copy(buf, rest)
	sub := &Decoder{b: buf}
	sub.get(rv.Elem())
	if sub.err != nil {
		d.err = sub.err // a bool that is neither 0 nor 1
	}
	return len(rest)
}
