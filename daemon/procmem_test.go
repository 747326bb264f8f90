package daemon

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// selfMem is a procMem on this process's own memory from base, through
// /proc/self/mem as the daemon's is through the client's.
func selfMem(t testing.TB, base []byte) *procMem {
	t.Helper()
	fd, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &procMem{fd: fd, pid: os.Getpid(), base: uint64(uintptr(unsafe.Pointer(&base[0]))), gone: new(atomic.Bool), failures: new(atomic.Uint64), stage: newStagePool()}
}

// ReadVec and WriteVec move every piece: runs of consecutive offsets
// longer than a staged copy, scattered pieces, a piece larger than the
// stage. A group that fails (a page not mapped) reads as zeros — never
// what the destination held, which for the engines is a frame's earlier
// bytes — and the groups after it still go through.
func TestProcMemVec(t *testing.T) {
	page := unix.Getpagesize()
	size := 3 * stageSize
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	fill(mem, 3)
	m := selfMem(t, mem)

	// 100 pieces of 800 bytes back to back (two staged copies), three
	// scattered ones, one of more than a stage.
	var p [][]byte
	var off []uint64
	for i := range 100 {
		p, off = append(p, make([]byte, 800)), append(off, uint64(100+800*i))
	}
	for _, o := range []uint64{10, 81000, 80990} {
		p, off = append(p, make([]byte, 9)), append(off, o)
	}
	p, off = append(p, make([]byte, stageSize+page)), append(off, uint64(20*page))
	read := func() {
		t.Helper()
		for _, b := range p {
			fill(b, 0xee)
		}
		if err := m.ReadVec(p, off); err != nil {
			t.Fatal(err)
		}
		for i := range p {
			if !bytes.Equal(p[i], mem[off[i]:off[i]+uint64(len(p[i]))]) {
				t.Fatalf("piece %d at %d differs", i, off[i])
			}
		}
	}
	read()
	for i := range p {
		fill(p[i], byte(50+i))
	}
	if err := m.WriteVec(p[:len(p)-1], off[:len(off)-1]); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteVec(p[len(p)-1:], off[len(off)-1:]); err != nil {
		t.Fatal(err)
	}
	for i := range p {
		if i < 100 || i == len(p)-1 {
			if !bytes.Equal(p[i], mem[off[i]:off[i]+uint64(len(p[i]))]) {
				t.Fatalf("written piece %d at %d differs", i, off[i])
			}
		}
	}
	read()

	// A page goes: the group into it fails, the others do not.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&mem[page])), uintptr(page), 0); e != 0 {
		t.Fatal(e)
	}
	p = [][]byte{make([]byte, 8), make([]byte, 8), make([]byte, 8), make([]byte, 8), make([]byte, 8)}
	off = []uint64{0, 8, uint64(page + 8), uint64(page + 16), uint64(2*page + 8)}
	for _, b := range p {
		fill(b, 0xee)
	}
	if err := m.ReadVec(p, off); err == nil {
		t.Fatal("a read from an unmapped page succeeded")
	}
	if !bytes.Equal(p[0], mem[:8]) || !bytes.Equal(p[1], mem[8:16]) || !bytes.Equal(p[4], mem[2*page+8:2*page+16]) {
		t.Fatalf("the groups beside the failed one: %v", p)
	}
	if !bytes.Equal(p[2], make([]byte, 8)) || !bytes.Equal(p[3], make([]byte, 8)) {
		t.Fatalf("the failed group read as %v, want zeros", p[2:4])
	}
	b := bytes.Repeat([]byte{0xee}, 8)
	if err := m.ReadAt(b, uint64(page)); err == nil || !bytes.Equal(b, make([]byte, 8)) {
		t.Fatalf("ReadAt from an unmapped page: %v, read as %v", err, b)
	}
	if m.failures.Load() != 2 {
		t.Fatalf("%d failures counted, want 2", m.failures.Load())
	}
}

// BenchmarkProcMem compares a receive batch's worth of reads (64 pieces
// back to back, as one message's payloads) through /proc/PID/mem (staged)
// with process_vm_readv, which the daemon used before.
func BenchmarkProcMem(b *testing.B) {
	for _, size := range []int{256, 1024, 4096} {
		mem := make([]byte, 64*size)
		fill(mem, 1)
		m := selfMem(b, mem)
		p := make([][]byte, 64)
		off := make([]uint64, 64)
		for i := range p {
			p[i], off[i] = make([]byte, size), uint64(i*size)
		}
		b.Run(fmt.Sprintf("procmem/%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(mem)))
			start := cpuTime()
			for b.Loop() {
				if err := m.ReadVec(p, off); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("process_vm_readv/%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(mem)))
			local := make([]unix.Iovec, 64)
			remote := make([]unix.RemoteIovec, 64)
			for i := range p {
				local[i] = unix.Iovec{Base: &p[i][0], Len: uint64(size)}
				remote[i] = unix.RemoteIovec{Base: uintptr(m.base + off[i]), Len: size}
			}
			start := cpuTime()
			for b.Loop() {
				if _, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time this process used: on a machine shared with other
// work it varies less than the wall clock.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
