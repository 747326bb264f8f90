package uverbs

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestABIHeaderGenerated: the committed header is what `go generate ./uverbs` writes from the
// layouts; a layout changed without regenerating it, or a hand edit to it, fails here.
func TestABIHeaderGenerated(t *testing.T) {
	want, err := ABIHeader()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", ABIHeaderPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what go generate writes from uverbs/abi.go: run `go generate ./uverbs` (make generate-abi) and commit it", ABIHeaderPath)
	}
}

// cProgram compiles src against the committed header and runs it, returning its output; it skips
// the test where there is no C compiler.
func cProgram(t *testing.T, src, stdin string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	dir := t.TempDir()
	header, err := filepath.Abs(filepath.Join("..", ABIHeaderPath))
	if err != nil {
		t.Fatal(err)
	}
	src = fmt.Sprintf("#include %q\n", header) + src
	if err := os.WriteFile(filepath.Join(dir, "abi.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "abi")
	// codec.c: the encoder and decoder the header's message codecs call.
	codec, err := filepath.Abs(filepath.Join("..", "provider", "common", "codec.c"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", bin, filepath.Join(dir, "abi.c"), codec).CombinedOutput(); err != nil {
		t.Fatalf("compiling the header: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running: %v", err)
	}
	return string(out)
}

// TestABIMatchesC compiles the header and has C report every layout's size and every field's
// offset and size, which must be Go's: a header whose C types or order differ from the Go
// layouts fails here, whatever its static assertions claim.
func TestABIMatchesC(t *testing.T) {
	var src, want strings.Builder
	src.WriteString("#include <stdio.h>\nint main(void) {\n")
	for _, l := range abiLayouts {
		ty := reflect.TypeOf(l.layout)
		fields, err := abiFields(ty)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&src, "\tprintf(\"%s %%zu\\n\", sizeof(struct %s));\n", l.name, l.name)
		fmt.Fprintf(&want, "%s %d\n", l.name, ty.Size())
		for _, f := range fields {
			fmt.Fprintf(&src, "\tprintf(\"%s.%s %%zu %%zu\\n\", offsetof(struct %s, %s), sizeof(((struct %s *)0)->%s));\n",
				l.name, f.path, l.name, f.path, l.name, f.path)
			fmt.Fprintf(&want, "%s.%s %d %d\n", l.name, f.path, f.off, f.size)
		}
	}
	for _, c := range abiConsts {
		fmt.Fprintf(&src, "\tprintf(\"%s %%d\\n\", (int)%s);\n", c.name, c.name)
		fmt.Fprintf(&want, "%s %d\n", c.name, c.value)
	}
	for o := OpHello; o < opEnd; o++ {
		fmt.Fprintf(&src, "\tprintf(\"XP_%s %%d\\n\", (int)XP_%s);\n", o, o)
		fmt.Fprintf(&want, "XP_%s %d\n", o, o)
	}
	src.WriteString("\treturn 0;\n}\n")
	got := cProgram(t, src.String(), "")
	gl, wl := strings.Split(got, "\n"), strings.Split(want.String(), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("C has %q, Go %q", g, w)
		}
	}
}

// TestABISlotsFromC: slots the C provider writes through the header's named fields decode in Go
// to what it wrote, and a CQE Go writes reads in C as Go wrote it; BIND_MW's operands, which Go
// carries in the atomic operands (SendWQE.Bind), included.
func TestABISlotsFromC(t *testing.T) {
	cqe := CQE{WRID: 1 << 62, Status: 5, Opcode: 128, VendorErr: 7, ByteLen: 4096, Imm: 0xdeadbeef, InvalidatedKey: 0x4242,
		QPNum: 0x11, SrcQP: 0x22, WCFlags: 2}
	cs := make([]byte, CQESize)
	PutCQE(cs, &cqe)
	out := cProgram(t, `#include <stdio.h>
#include <string.h>
static void dump(const char *name, const void *p, size_t n)
{
	printf("%s ", name);
	for (size_t i = 0; i < n; i++)
		printf("%02x", ((const unsigned char *)p)[i]);
	printf("\n");
}
int main(void)
{
	unsigned char slot[XP_SEND_SLOT_HEADER + 2 * XP_SGE] __attribute__((aligned(8)));
	memset(slot, 0, sizeof(slot));
	struct xp_send_wqe *w = (struct xp_send_wqe *)slot;
	w->wr_id = 0x1122334455667788ull;
	w->opcode = 5;
	w->send_flags = 2;
	w->num_sge = 2;
	w->imm_data = 0xa1b2c3d4;
	w->remote_addr = 0x7fff00001000ull;
	w->rkey = 0x101;
	w->invalidate_rkey = 0x202;
	w->args.atomic.compare_add = 0x3030303030303030ull;
	w->args.atomic.swap = 0x4040404040404040ull;
	w->ah = 7;
	w->remote_qpn = 0x123456;
	w->remote_qkey = 0x11111111;
	struct xp_sge *sge = (struct xp_sge *)(w + 1);
	sge[0] = (struct xp_sge){.addr = 0x1000, .length = 64, .lkey = 0x55};
	sge[1] = (struct xp_sge){.addr = 0x2000, .length = 8, .lkey = 0x66};
	dump("atomic", slot, sizeof(slot));
	memset(slot, 0, sizeof(slot));
	w->wr_id = 9;
	w->opcode = 8; /* IBV_WR_BIND_MW */
	w->remote_addr = 0x5000;
	w->rkey = 0x1234;
	w->invalidate_rkey = 0x1200;
	w->args.bind.length = 4096;
	w->args.bind.access = 0xf;
	w->args.bind.lkey = 0xabcdef;
	dump("bind", slot, XP_SEND_SLOT_HEADER);
	memset(slot, 0, sizeof(slot));
	w->wr_id = 3;
	w->send_flags = XP_SEND_INLINE;
	w->inline_len = 5;
	memcpy(w + 1, "hello", 5);
	dump("inline", slot, XP_SEND_SLOT_HEADER + 5);
	unsigned char rs[XP_RECV_SLOT_HEADER + XP_SGE] __attribute__((aligned(8)));
	struct xp_recv_wqe *r = (struct xp_recv_wqe *)rs;
	*r = (struct xp_recv_wqe){.wr_id = 77, .num_sge = 1};
	*(struct xp_sge *)(r + 1) = (struct xp_sge){.addr = 0x3000, .length = 100, .lkey = 0x77};
	dump("recv", rs, sizeof(rs));
	char line[512];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	struct xp_cqe c;
	for (size_t i = 0; i < sizeof(c); i++)
		sscanf(line + 2 * i, "%2hhx", (unsigned char *)&c + i);
	printf("cqe %llx %u %u %u %u %u %u %u %u %u\n", (unsigned long long)c.wr_id, c.status, c.opcode, c.vendor_err,
	       c.byte_len, c.imm_data, c.invalidated_rkey, c.qp_num, c.src_qp, c.wc_flags);
	return 0;
}
`, hex.EncodeToString(cs)+"\n")
	got := slotLines(t, out)

	var w SendWQE
	sgl, inline, err := SendWQEOf(got["atomic"], &w, nil)
	want := SendWQE{WRID: 0x1122334455667788, Opcode: 5, SendFlags: 2, NumSGE: 2, Imm: 0xa1b2c3d4, RemoteAddr: 0x7fff00001000,
		RKey: 0x101, InvRKey: 0x202, CompareAdd: 0x3030303030303030, Swap: 0x4040404040404040, AH: 7, RemoteQPN: 0x123456,
		RemoteQKey: 0x11111111}
	if err != nil || inline != nil || w != want || !reflect.DeepEqual(sgl, []SGE{{0x1000, 64, 0x55}, {0x2000, 8, 0x66}}) {
		t.Errorf("C's atomic slot decodes to %+v %v %q %v, want %+v", w, sgl, inline, err, want)
	}

	w = SendWQE{}
	if _, _, err := SendWQEOf(got["bind"], &w, nil); err != nil {
		t.Fatal(err)
	}
	length, access, lkey := w.Bind()
	if w.Opcode != 8 || w.RemoteAddr != 0x5000 || w.RKey != 0x1234 || w.InvRKey != 0x1200 || length != 4096 || access != 0xf || lkey != 0xabcdef {
		t.Errorf("C's BIND_MW slot decodes to %+v: length %d access %#x lkey %#x", w, length, access, lkey)
	}
	// And the other way: Go's BIND_MW is the bytes C's is.
	var b SendWQE
	b.WRID, b.Opcode, b.RemoteAddr, b.RKey, b.InvRKey = 9, 8, 0x5000, 0x1234, 0x1200
	b.SetBind(4096, 0xf, 0xabcdef)
	slot := make([]byte, SendSlotHeader)
	PutSendWQE(slot, &b, nil, nil)
	if !bytes.Equal(slot, got["bind"]) {
		t.Errorf("Go's BIND_MW slot\n%x\nC's\n%x", slot, got["bind"])
	}

	w = SendWQE{}
	if _, inline, err := SendWQEOf(got["inline"], &w, nil); err != nil || string(inline) != "hello" || w.SendFlags != SendInline {
		t.Errorf("C's inline slot decodes to %+v %q %v", w, inline, err)
	}

	id, rsgl, err := RecvWQEOf(got["recv"], nil)
	if err != nil || id != 77 || !reflect.DeepEqual(rsgl, []SGE{{0x3000, 100, 0x77}}) {
		t.Errorf("C's receive slot decodes to %d %v %v", id, rsgl, err)
	}

	wantCQE := fmt.Sprintf("cqe %x %d %d %d %d %d %d %d %d %d", cqe.WRID, cqe.Status, cqe.Opcode, cqe.VendorErr, cqe.ByteLen, cqe.Imm,
		cqe.InvalidatedKey, cqe.QPNum, cqe.SrcQP, cqe.WCFlags)
	if !strings.Contains(out, wantCQE+"\n") {
		t.Errorf("C reads Go's CQE as\n%s\nwant %s", out, wantCQE)
	}
}

// slotLines parses the program's "name hex" lines.
func slotLines(t *testing.T, out string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, h, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			continue
		}
		m[name] = b
	}
	return m
}

// TestProviderNamedFields: the C files that write and read the rings do so through xp_abi.h's
// named fields, with no byte offsets of their own (slot + 16, cur[8], lkey << 32) that the
// header's checks cannot see.
func TestProviderNamedFields(t *testing.T) {
	raw := regexp.MustCompile(`\b(slot|s|w|body|cur|p|page|mem)\s*(\+\s*[0-9]+|\[[0-9]+\])|<<\s*32|\b(put|get)(16|32|64)\(`)
	files, err := filepath.Glob(filepath.Join("..", "provider", "verbs", "*.c"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the provider's sources: %v %v", files, err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if raw.MatchString(line) {
				t.Errorf("%s:%d: a raw offset into shared memory: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
