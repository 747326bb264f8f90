package uverbs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestExtPart: an extensible part is cut to the reader's length by its writer, zero-extended
// by a reader sent fewer bytes than it knows, and refused (E2BIG) only when the bytes past
// what the reader knows are not zero, as copy_struct_from_user.
func TestExtPart(t *testing.T) {
	full := Hello{Version: 0x0201, ReplyExt: 0x0403}
	for _, tc := range []struct {
		n    int
		want []byte
	}{{0, nil}, {1, []byte{1}}, {2, []byte{1, 2}}, {4, []byte{1, 2, 3, 4}}, {9, []byte{1, 2, 3, 4}}} {
		e := &Encoder{}
		e.PutExt(&full, tc.n)
		if !bytes.Equal(e.Bytes(), tc.want) {
			t.Errorf("PutExt to %d bytes: %x, want %x", tc.n, e.Bytes(), tc.want)
		}
	}
	for _, tc := range []struct {
		body []byte
		want Hello
		n    int
		err  error
	}{
		{nil, Hello{}, 0, nil},
		{[]byte{1, 0}, Hello{Version: 1}, 2, nil}, // a library from before ReplyExt
		{[]byte{1, 0, 8}, Hello{Version: 1, ReplyExt: 8}, 3, nil},
		{[]byte{1, 0, 8, 0}, Hello{Version: 1, ReplyExt: 8}, 4, nil},
		{[]byte{1, 0, 8, 0, 0, 0, 0}, Hello{Version: 1, ReplyExt: 8}, 4, nil}, // a newer client's fields, unset
		{[]byte{1, 0, 8, 0, 0, 1}, Hello{}, 0, syscall.E2BIG},                 // a newer client's field, set
	} {
		_, d, err := Decode(append(make([]byte, HeaderLen), tc.body...))
		if err != nil {
			t.Fatal(err)
		}
		var h Hello
		n := d.GetExt(&h)
		err = d.End()
		if h != tc.want || n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("GetExt(%x) = %+v, %d bytes, %v; want %+v, %d, %v", tc.body, h, n, err, tc.want, tc.n, tc.err)
		}
	}
}

// TestHelloTailInC: the C library's HELLO decoder reads a reply whose tail is shorter than it
// knows (an older daemon's: the field reads zero), whole, or longer with zeros, and fails one
// whose extra bytes are not zero; the base before the tail is read alike in every case.
func TestHelloTailInC(t *testing.T) {
	info := DeviceInfo{Name: "xdp_x", Engines: 7}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\nint main(void)\n{\n")
	var want []string
	for i, tail := range [][]byte{nil, {1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 9}} {
		e := &Encoder{}
		info.Put(e)
		msg := append(e.Bytes(), tail...)
		fmt.Fprintf(&src, "\t{\n\t\tstatic const uint8_t msg[] = \"%s\";\n\t\tstruct xp_dec d = {.p = msg, .n = sizeof(msg) - 1};\n", cBytes(msg))
		fmt.Fprintf(&src, "\t\tstruct xp_hello_rep r;\n\t\tmemset(&r, 0xee, sizeof(r));\n\t\txp_get_hello_rep(&d, &r);\n")
		fmt.Fprintf(&src, "\t\tprintf(\"%d err %%d left %%zu engines %%u dm %%llx\\n\", (int)d.err, d.n, r.engines, (unsigned long long)r.max_dm_size);\n\t}\n", i)
		var ext DeviceInfoExt
		_, dd, _ := Decode(append(make([]byte, HeaderLen), tail...))
		dd.GetExt(&ext)
		bad := 0
		if dd.End() != nil {
			bad, ext.MaxDMSize = 1, 0x0807060504030201 // C leaves the bytes it read
		}
		want = append(want, fmt.Sprintf("%d err %d left 0 engines 7 dm %x", i, bad, ext.MaxDMSize))
	}
	src.WriteString("\treturn 0;\n}\n")
	out := cProgram(t, src.String(), "")
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("C decodes:\n%s\nwant the line %q", out, w)
		}
	}
}
