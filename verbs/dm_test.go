package verbs

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/loader"
)

// dmPair connects A to B, both in-process over the in-memory link, and
// gives B a block of device memory of n bytes.
func dmPair(t *testing.T, n int) (a, b *node, dm *DM) {
	t.Helper()
	la, lb := memlink.NewPair(4096 + 200)
	a = newNode(t, newDevice(t, la, macA, ipA, 4096), 1<<16)
	b = newNode(t, newDevice(t, lb, macB, ipB, 4096), 1<<16)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU1024})
	dm, err := b.dev.AllocDM(n)
	if errors.Is(err, loader.ErrNoDeviceMemory) {
		t.Skipf("no device memory here: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { _ = dm.Free() })
	return a, b, dm
}

// TestDMErrnos: device memory's misuse fails as the kernel and mlx5 fail
// it.
func TestDMErrnos(t *testing.T) {
	_, b, dm := dmPair(t, 8192)
	if got := b.dev.QueryDevice().MaxDMSize; got != MaxDMSize {
		t.Errorf("max_dm_size %d, want %d", got, MaxDMSize)
	}
	for _, n := range []int{0, -4, MaxDMSize + 1} {
		if _, err := b.dev.AllocDM(n); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("AllocDM(%d): %v, want EINVAL", n, err)
		}
	}
	word := make([]byte, 4)
	for _, c := range []struct {
		off, n int
		want   error
	}{
		{8192, 4, syscall.EFAULT}, {8190, 4, syscall.EFAULT}, {-4, 4, syscall.EFAULT}, // past either end
		{2, 4, syscall.EINVAL}, {0, 3, syscall.EINVAL}, // not whole words
		{8188, 4, nil}, {0, 0, nil},
	} {
		buf := make([]byte, c.n)
		if err := dm.CopyTo(c.off, buf); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CopyTo %d bytes at %d: %v, want %v", c.n, c.off, err, c.want)
		}
		if err := dm.CopyFrom(buf, c.off); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CopyFrom %d bytes at %d: %v, want %v", c.n, c.off, err, c.want)
		}
	}
	rw := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	if _, err := b.pd.RegDMMR(dm, 0, 4096, rw); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a region over device memory without ZERO_BASED: %v, want EINVAL", err)
	}
	for _, c := range [][2]int{{4096, 4097}, {8193, 0}, {-1, 16}, {0, 8193}} {
		if _, err := b.pd.RegDMMR(dm, c[0], c[1], rw|AccessZeroBased); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("a region of %d bytes at %d of 8192: %v, want EINVAL", c[1], c[0], err)
		}
	}
	if _, err := b.pd.RegDMMR(dm, 0, 16, rw|AccessZeroBased|AccessMWBind); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a region over device memory with MW_BIND: %v, want EINVAL", err)
	}
	// A zero-length region registers, as on mlx5 (pyverbs' test_create_dm_mr).
	empty, err := b.pd.RegDMMR(dm, 8192, 0, AccessLocalWrite|AccessZeroBased)
	must(t, err)
	if empty.Len() != 0 {
		t.Errorf("zero-length region of %d bytes", empty.Len())
	}
	must(t, empty.Dereg())
	mr, err := b.pd.RegDMMR(dm, 4096, 4096, rw|AccessZeroBased)
	must(t, err)
	if mr.Addr() != 0 || mr.Len() != 4096 {
		t.Errorf("region at %#x of %d bytes, want zero-based 4096", mr.Addr(), mr.Len())
	}
	if err := dm.Free(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("freeing device memory a region lies in: %v, want EBUSY", err)
	}
	must(t, mr.Dereg())
	must(t, dm.Free())
	if err := dm.Free(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("freeing device memory twice: %v, want EINVAL", err)
	}
	if err := dm.CopyTo(0, word); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("copying into freed device memory: %v, want EINVAL", err)
	}
	if _, err := b.pd.RegDMMR(dm, 0, 16, rw|AccessZeroBased); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a region over freed device memory: %v, want EINVAL", err)
	}
}

// TestDMWriteRead: a peer's RDMA WRITE lands in device memory, where
// ibv_memcpy_from_dm and the BPF map (what the XDP program would see) both
// find it, and a READ returns what ibv_memcpy_to_dm put there; an access
// past the region's end is refused.
func TestDMWriteRead(t *testing.T) {
	a, b, dm := dmPair(t, 3*4096)
	const off, n = 4096, 6000
	mr, err := b.pd.RegDMMR(dm, off, 2*4096, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessZeroBased)
	must(t, err)
	t.Cleanup(func() { _ = mr.Dereg() })
	fill(a.mr.Bytes()[:n], 3)
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, n), RemoteAddr: 100, RKey: mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE into device memory: %+v", wc)
	}
	got := make([]byte, 8192)
	must(t, dm.CopyFrom(got, off))
	equalBytes(t, "device memory after the WRITE", got[100:100+n], a.mr.Bytes()[:n])
	if !bytes.Equal(got[:100], make([]byte, 100)) || !bytes.Equal(got[100+n:], make([]byte, 8192-100-n)) {
		t.Error("the WRITE touched device memory outside its range")
	}
	// The same bytes through the map an XDP program would write: page
	// off/4096+1 holds the region's bytes 4096..8191.
	page := make([]byte, loader.DMPage)
	must(t, dm.mem.(*loader.DeviceMemory).Map().Lookup(uint32(off/loader.DMPage+1), page)) // the in-process provider's
	equalBytes(t, "the BPF map's page", page[:100+n-4096], got[4096:100+n])

	src := make([]byte, 4096)
	fill(src, 9)
	must(t, dm.CopyTo(off+4096, src))
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 8192, 4096), RemoteAddr: 4096, RKey: mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("READ from device memory: %+v", wc)
	}
	equalBytes(t, "READ from device memory", a.mr.Bytes()[8192:8192+4096], src)

	postSend(t, a, SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), RemoteAddr: 8192 - 32, RKey: mr.RKey()})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("WRITE past the device memory region's end: %+v, want REM_ACCESS_ERR", wc)
	}
	must(t, dm.CopyFrom(got[:32], 3*4096-32))
	equalBytes(t, "the region's last bytes after a refused WRITE", got[:32], src[4096-32:])
}
