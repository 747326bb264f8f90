package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
)

// TestHelloVersions: HELLO is answered as the kernel answers an extended uverbs command. A
// library from before the reply's tail (its HELLO the version alone) gets a reply it parses
// to the end, the tail cut to what a client asks for; a request with a field this daemon does
// not know set is refused with E2BIG; an ABI version this daemon does not serve is refused with
// EPROTONOSUPPORT and a log line that says so, and the session may greet again with one it
// serves.
func TestHelloVersions(t *testing.T) {
	tb := newTestbed(t)
	var logged bytes.Buffer
	tb.srv.log = slog.New(slog.NewTextHandler(&logged, nil))
	hello := func(ss *session, body func(*uverbs.Encoder)) (*uverbs.Decoder, syscall.Errno) {
		t.Helper()
		reply, out, err := ss.handle(msg(uverbs.OpHello, body), nil)
		ipc.CloseAll(out)
		if err != nil {
			t.Fatalf("HELLO: the daemon disconnected the client: %v", err)
		}
		h, d, err := uverbs.Decode(reply)
		if err != nil {
			t.Fatal(err)
		}
		if h.Errno == 0 && len(out) != 3 {
			t.Errorf("HELLO's reply with %d fds, want 3", len(out))
		}
		return d, syscall.Errno(h.Errno)
	}
	fresh := func() *session {
		ss := newSession(tb.srv, nil, ipc.Peer{PID: 1})
		t.Cleanup(ss.release)
		return ss
	}
	wantDM := uint64(tb.srv.cfg.Device.QueryDevice().MaxDMSize)

	// A library from before the tail: the reply is DeviceInfo, nothing after it.
	d, errno := hello(fresh(), func(e *uverbs.Encoder) { e.U16(1) })
	var info uverbs.DeviceInfo
	info.Get(d)
	if err := d.End(); errno != 0 || err != nil || info.Name == "" {
		t.Errorf("an old library's HELLO: errno %d, %+v, %v (a reply it cannot parse)", errno, info, err)
	}

	// The tail, as much of it as asked for.
	extLen := uverbs.ExtLen(uverbs.DeviceInfoExt{})
	for _, n := range []int{0, 3, extLen, extLen + 100} {
		d, errno := hello(fresh(), func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: uint16(n)}) })
		info.Get(d)
		var ext uverbs.DeviceInfoExt
		got := d.GetExt(&ext)
		want := uverbs.DeviceInfoExt{MaxDMSize: wantDM, Doorbells: uint32(tb.srv.cfg.Device.Engines())}
		if n < extLen {
			want.Doorbells = 0 // the cases cut the tail within MaxDMSize
			var full [8]byte
			for i := range full {
				full[i] = byte(wantDM >> (8 * i))
			}
			var cut [8]byte
			copy(cut[:n], full[:n])
			want.MaxDMSize = 0
			for i := range cut {
				want.MaxDMSize |= uint64(cut[i]) << (8 * i)
			}
		}
		if err := d.End(); errno != 0 || err != nil || got != min(n, extLen) || ext != want {
			t.Errorf("HELLO asking for %d bytes of the tail: errno %d, %d bytes, %+v, %v; want %d bytes, %+v", n, errno, got, ext, err, min(n, extLen), want)
		}
	}

	// A newer library's request field set: E2BIG, as copy_struct_from_user.
	_, errno = hello(fresh(), func(e *uverbs.Encoder) {
		e.Put(&uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: uint16(extLen)})
		e.U16(1)
	})
	if errno != syscall.E2BIG {
		t.Errorf("HELLO with a field this daemon does not know: errno %v, want E2BIG", errno)
	}

	// A version this daemon does not serve, then one it does.
	ss := fresh()
	for _, v := range []uint16{uverbs.ABIVersion + 1, uverbs.MinABIVersion - 1, 0xffff} {
		if _, errno := hello(ss, func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: v, ReplyExt: uint16(extLen)}) }); errno != syscall.EPROTONOSUPPORT {
			t.Errorf("HELLO of ABI version %d: errno %v, want EPROTONOSUPPORT", v, errno)
		}
	}
	if n := strings.Count(logged.String(), "ABI version this daemon does not serve"); n != 1 {
		t.Errorf("%d log lines for a session's refused HELLOs, want 1:\n%s", n, logged.String())
	}
	if _, errno := hello(ss, func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: uint16(extLen)}) }); errno != 0 {
		t.Errorf("HELLO of ABI version %d after a refused one: errno %v", uverbs.ABIVersion, errno)
	}
}
