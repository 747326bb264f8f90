package uverbs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestEveryOpHasBodies: every op's request and reply is defined (opBodies), and only xdproce's
// own commands are Go-only.
func TestEveryOpHasBodies(t *testing.T) {
	goOnly := map[Op]bool{OpCounters: true, OpShutdown: true, OpList: true}
	for o := OpHello; o < opEnd; o++ {
		b, ok := opBodies[o]
		if !ok {
			t.Errorf("%v: no body in opBodies", o)
			continue
		}
		if b.goOnly != goOnly[o] {
			t.Errorf("%v: Go-only %v", o, b.goOnly)
		}
	}
	for o := range opBodies {
		if o < OpHello || o >= opEnd {
			t.Errorf("opBodies has %v, not an op", o)
		}
	}
}

// leaf is one scalar member of a body: its C path (r.attr.cap.max_send_wr) and the Go value it
// is.
type leaf struct {
	path string
	v    reflect.Value
}

// bodyLeaves lists the leaves of a body's parts, set into vals (one settable value per part),
// with the C paths the generator gives them.
func bodyLeaves(ps []part, vals []reflect.Value) []leaf {
	var out []leaf
	for i, p := range ps {
		switch {
		case p.name == "":
			out = append(out, structLeaves(vals[i], "")...)
		case reflect.TypeOf(p.typ) == reflect.TypeOf(Ref{}):
			out = append(out, leaf{p.name, vals[i].Field(0)})
		default:
			out = append(out, structLeaves(vals[i], p.name+".")...)
		}
	}
	return out
}

func structLeaves(v reflect.Value, prefix string) []leaf {
	var out []leaf
	for i := range v.NumField() {
		f, name := v.Field(i), prefix+v.Type().Field(i).Tag.Get("abi")
		if f.Kind() == reflect.Struct {
			out = append(out, structLeaves(f, name+".")...)
			continue
		}
		out = append(out, leaf{name, f})
	}
	return out
}

// fill gives leaf k a value no other leaf of the body has (as far as its width allows), and
// returns the C statements that set the same value.
func fill(k int, l leaf) string {
	v := l.v
	seed := uint64(k+1) * 0x0101010101010101
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x := seed ^ uint64(k)<<4 ^ 0x8040201008040201
		v.SetUint(x & (1<<v.Type().Bits() - 1))
		return fmt.Sprintf("r.%s = %dull;", l.path, v.Uint())
	case reflect.Int32:
		v.SetInt(-int64(k) - 1000)
		return fmt.Sprintf("r.%s = %d;", l.path, v.Int())
	case reflect.Bool:
		v.SetBool(k%2 == 0)
		return fmt.Sprintf("r.%s = %v;", l.path, v.Bool())
	case reflect.Array:
		b := make([]byte, v.Len())
		for i := range b {
			b[i] = byte(k*17 + i + 1)
		}
		reflect.Copy(v, reflect.ValueOf(b))
		return fmt.Sprintf("memcpy(r.%s, \"%s\", %d);", l.path, cBytes(b), len(b))
	case reflect.String, reflect.Slice:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Array {
			n := v.Type().Elem().Len()
			count := 1 + k%3
			b := make([]byte, count*n)
			s := reflect.MakeSlice(v.Type(), count, count)
			for i := range b {
				b[i] = byte(k*13 + i + 1)
				s.Index(i / n).Index(i % n).SetUint(uint64(b[i]))
			}
			v.Set(s)
			return fmt.Sprintf("r.%s = (const uint8_t (*)[%d])\"%s\"; r.%s_count = %d;", l.path, n, cBytes(b), l.path, count)
		}
		b := make([]byte, 1+k%7)
		for i := range b {
			b[i] = byte('a' + (k+i)%26)
		}
		if v.Kind() == reflect.String {
			v.SetString(string(b))
		} else {
			v.SetBytes(b)
		}
		return fmt.Sprintf("r.%s = (const uint8_t *)\"%s\"; r.%s_len = %d;", l.path, cBytes(b), l.path, len(b))
	}
	panic(fmt.Sprintf("no test value for %s", v.Type()))
}

func cBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	return s.String()
}

// show is the line C prints for leaf l of op's reply, and the C statement that prints it.
func show(prefix string, l leaf) (want, stmt string) {
	v := l.v
	name := prefix + " " + l.path
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("%s %d", name, v.Uint()), fmt.Sprintf("printf(\"%s %%llu\\n\", (unsigned long long)r.%s);", name, l.path)
	case reflect.Int32:
		return fmt.Sprintf("%s %d", name, v.Int()), fmt.Sprintf("printf(\"%s %%lld\\n\", (long long)r.%s);", name, l.path)
	case reflect.Bool:
		b := 0
		if v.Bool() {
			b = 1
		}
		return fmt.Sprintf("%s %d", name, b), fmt.Sprintf("printf(\"%s %%d\\n\", (int)r.%s);", name, l.path)
	case reflect.Array:
		b := make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(b), v)
		return fmt.Sprintf("%s %x", name, b), fmt.Sprintf("hexdump(\"%s\", r.%s, %d);", name, l.path, len(b))
	case reflect.String:
		return fmt.Sprintf("%s %x", name, v.String()), fmt.Sprintf("hexdump(\"%s\", r.%s, r.%s_len);", name, l.path, l.path)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Array {
			var b []byte
			for i := range v.Len() {
				el := make([]byte, v.Type().Elem().Len())
				reflect.Copy(reflect.ValueOf(el), v.Index(i))
				b = append(b, el...)
			}
			return fmt.Sprintf("%s %x", name, b), fmt.Sprintf("hexdump(\"%s\", r.%s, (size_t)r.%s_count * %d);", name, l.path, l.path, v.Type().Elem().Len())
		}
		return fmt.Sprintf("%s %x", name, v.Bytes()), fmt.Sprintf("hexdump(\"%s\", r.%s, r.%s_len);", name, l.path, l.path)
	}
	panic(fmt.Sprintf("no test value for %s", v.Type()))
}

func newParts(ps []part) []reflect.Value {
	vals := make([]reflect.Value, len(ps))
	for i, p := range ps {
		vals[i] = reflect.New(reflect.TypeOf(p.typ)).Elem()
	}
	return vals
}

// TestMsgBodiesMatchC: for every op a C client speaks, the request C encodes through the
// header's named fields is the bytes Go's Encoder writes for the same values, and decodes in Go
// (part by part, as the daemon reads it) to those values; the reply Go encodes decodes in C to
// what Go put in it, every field and nothing left over. A field C orders, sizes or names
// otherwise than the Go definition fails here.
func TestMsgBodiesMatchC(t *testing.T) {
	var src strings.Builder
	src.WriteString(`#include <stdio.h>
static void hexdump(const char *name, const void *p, size_t n)
{
	printf("%s ", name);
	for (size_t i = 0; i < n; i++)
		printf("%02x", ((const unsigned char *)p)[i]);
	printf("\n");
}
int main(void)
{
`)
	wantReq := map[string][]reflect.Value{}
	wantReqBytes := map[string][]byte{}
	var wantRep []string
	for o := OpHello; o < opEnd; o++ {
		body := opBodies[o]
		if body.goOnly {
			continue
		}
		name := opCName(o)
		if len(body.req) > 0 {
			vals := newParts(body.req)
			fmt.Fprintf(&src, "\t{\n\t\tstruct xp_%s_req r;\n\t\tmemset(&r, 0, sizeof(r));\n", name)
			for k, l := range bodyLeaves(body.req, vals) {
				fmt.Fprintf(&src, "\t\t%s\n", fill(k, l))
			}
			fmt.Fprintf(&src, "\t\tstruct xp_enc e = {0};\n\t\txp_put_%s_req(&e, &r);\n\t\tif (e.overflow)\n\t\t\treturn 1;\n\t\thexdump(\"%s\", e.b, e.n);\n\t}\n", name, name)
			e := &Encoder{}
			for _, v := range vals {
				e.Put(v.Addr().Interface())
			}
			wantReq[name], wantReqBytes[name] = vals, e.Bytes()
		}
		if len(body.rep) > 0 {
			vals := newParts(body.rep)
			ls := bodyLeaves(body.rep, vals)
			for k, l := range ls {
				fill(k+3, l)
			}
			e := &Encoder{}
			for _, v := range vals {
				e.Put(v.Addr().Interface())
			}
			fmt.Fprintf(&src, "\t{\n\t\tstatic const uint8_t msg[] = \"%s\";\n\t\tstruct xp_dec d = {.p = msg, .n = sizeof(msg) - 1};\n", cBytes(e.Bytes()))
			fmt.Fprintf(&src, "\t\tstruct xp_%s_rep r;\n\t\tmemset(&r, 0, sizeof(r));\n\t\txp_get_%s_rep(&d, &r);\n", name, name)
			fmt.Fprintf(&src, "\t\tprintf(\"%s-rep end %%d %%zu\\n\", (int)d.err, d.n);\n", name)
			wantRep = append(wantRep, name+"-rep end 0 0")
			for _, l := range ls {
				w, stmt := show(name+"-rep", l)
				fmt.Fprintf(&src, "\t\t%s\n", stmt)
				wantRep = append(wantRep, w)
			}
			src.WriteString("\t}\n")
		}
	}
	src.WriteString("\treturn 0;\n}\n")
	out := cProgram(t, src.String(), "")
	got := slotLines(t, out)
	for name, want := range wantReqBytes {
		if !bytes.Equal(got[name], want) {
			t.Errorf("%s request: C encodes\n%x\nGo\n%x", name, got[name], want)
			continue
		}
		// The daemon's side: Go decodes C's bytes, part by part, to the values C set.
		_, d, err := Decode(append(make([]byte, HeaderLen), got[name]...))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wantReq[name] {
			g := reflect.New(w.Type())
			d.Get(g.Interface())
			if !reflect.DeepEqual(g.Elem().Interface(), w.Interface()) {
				t.Errorf("%s request: Go decodes C's %T as %+v, want %+v", name, w.Interface(), g.Elem().Interface(), w.Interface())
			}
		}
		if err := d.End(); err != nil {
			t.Errorf("%s request: %v", name, err)
		}
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		lines[l] = true
	}
	for _, w := range wantRep {
		if !lines[w] {
			k, _, _ := strings.Cut(w, " ")
			path := strings.Fields(w)[1]
			var g string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[0] == k && f[1] == path {
					g = l
				}
			}
			t.Errorf("reply: C decodes %q, Go encoded %q", g, w)
		}
	}
	if len(wantReqBytes) == 0 || len(wantRep) == 0 {
		t.Fatal("no ops tested")
	}
}

// TestProviderNamedMessageFields: the C libraries build and read control messages only through
// xp_abi.h's generated structs and codecs (xp_put_OP_req, xp_get_OP_rep), never field by field
// with the primitive encoders, whose order and widths no test would then see. provider/common
// holds the primitives; private.c forwards bodies librdmacm encoded, as bytes.
func TestProviderNamedMessageFields(t *testing.T) {
	prim := regexp.MustCompile(`\bxp_(u8|u16|u32|u64|raw|bytes|get_u8|get_u16|get_u32|get_u64|get_bool|get_raw|get_bytes|get_into)\s*\(`)
	var files []string
	for _, dir := range []string{"verbs", "rdmacm"} {
		fs, err := filepath.Glob(filepath.Join("..", "provider", dir, "*.[ch]"))
		if err != nil || len(fs) == 0 {
			t.Fatalf("the provider's sources in %s: %v %v", dir, fs, err)
		}
		files = append(files, fs...)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if filepath.Base(f) == "private.c" && strings.TrimSpace(line) == "xp_raw(e, body, len);" {
				continue
			}
			if prim.MatchString(line) {
				t.Errorf("%s:%d: a control message's field encoded by hand: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// FuzzMsgBodies: any bytes, decoded as any op's request or reply part by part as the daemon and
// the Go clients decode them, end in a value, ErrMalformed or (an extensible part with fields
// this side does not know) ErrUnknownFields, never a panic; a body that decodes encodes back to
// the bytes it came from (an extensible part cut at the length it came in, less the zeros past
// its fields).
func FuzzMsgBodies(f *testing.F) {
	f.Add(uint16(OpCreateQP), false, []byte{1, 2, 3})
	f.Add(uint16(OpHello), true, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})
	f.Add(uint16(OpCMGetEvent), true, bytes.Repeat([]byte{0xff}, 300))
	f.Add(uint16(OpCounters), true, []byte{2, 0, 1, 0, 'a', 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint16(OpHello), false, []byte{1, 0})             // a library from before HELLO's tail
	f.Add(uint16(OpHello), false, []byte{1, 0, 8, 0, 0, 1}) // a newer library's field
	f.Add(uint16(OpHello), true, append(make([]byte, 3+8+6+20+16+8+2+2+4), 1, 2, 3))
	f.Fuzz(func(t *testing.T, op uint16, reply bool, body []byte) {
		b, ok := opBodies[Op(op)]
		if !ok {
			return
		}
		ps := b.req
		if reply {
			ps = b.rep
		}
		_, d, err := Decode(append(make([]byte, HeaderLen), body...))
		if err != nil {
			return
		}
		vals := newParts(ps)
		extLen, extZeros := -1, 0
		for _, v := range vals {
			if x, ok := v.Addr().Interface().(extensible); ok {
				rest := len(d.b)
				extLen = d.GetExt(x)
				extZeros = rest - extLen
				continue
			}
			d.Get(v.Addr().Interface())
		}
		if err := d.End(); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownFields) {
				t.Fatalf("%v: %x: %v", Op(op), body, err)
			}
			return
		}
		e := &Encoder{}
		for _, v := range vals {
			if x, ok := v.Addr().Interface().(extensible); ok {
				e.PutExt(x, extLen)
				continue
			}
			e.Put(v.Addr().Interface())
		}
		body = body[:len(body)-extZeros]
		// Bools decode from 0 and 1 only, so every field that decoded
		// encodes as it came.
		if !bytes.Equal(e.Bytes(), body) {
			t.Fatalf("%v: decoded %x, encodes back as %x", Op(op), body, e.Bytes())
		}
	})
}
