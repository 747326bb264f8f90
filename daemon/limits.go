package daemon

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/verbs"
)

// Limits caps what one client may hold, so that no client drains what the
// others need: its share of each device-wide pool, and of what the daemon
// itself holds for it (file descriptors, mappings). The kernel's uverbs
// gets the same bounds from the device's attributes and the process's
// rlimits. A client, here, is a process of root's or of the daemon's user,
// or all the processes of another user together (however many
// connections each opens). Zero fields take the defaults (withDefaults).
type Limits struct {
	// Per-client counts of objects; over them the request fails with
	// ENOMEM, as the kernel's allocations do when a pool is exhausted.
	PDs, MRs, MWs, CQs, QPs, SRQs, AHs int
	// CMIDs bounds the client's rdma_cm IDs (each may hold a CM port),
	// CMChannels its event channels.
	CMIDs, CMChannels int
	// Resolutions bounds the client's address resolutions in progress;
	// ResolveTimeout caps the timeout a client may give one.
	Resolutions    int
	ResolveTimeout time.Duration
	// FDs bounds the file descriptors the daemon holds for the client (one
	// per CQ and CM channel, three per connection): over it, EMFILE, and
	// a connection past it is refused.
	// Mappings bounds the shared-memory mappings the daemon holds for it
	// (one per CQ, SRQ and shared region, two per QP): over it, ENOMEM.
	FDs, Mappings int
	// DMs bounds the client's blocks of device memory (each a BPF map
	// the daemon holds, an fd and a mapping), DMBytes their bytes (kernel
	// memory, charged to the daemon): over either, ENOMEM.
	DMs     int
	DMBytes uint64
	// MappedBytes bounds the bytes of the client's shared regions the
	// daemon maps, whatever the client's RLIMIT_MEMLOCK or capabilities: a
	// sealed sparse memfd costs the client nothing, the daemon address space.
	MappedBytes uint64
}

// The device-wide pools a client's default share is a fraction of.
const (
	mrKeyIndices = 0x80000  // verbs' MR key indices
	mwKeyIndices = 0x100000 // verbs' MW key indices
	// poolShare: one client holds at most a quarter of a bounded pool.
	poolShare = 4
	// maxResolveTimeout is the longest address resolution a client gets:
	// librdmacm's users ask for a few seconds (rping, ucmatose: 2 s).
	maxResolveTimeout = 30 * time.Second
	// defaultMappedBytes: a 32nd of a 47-bit address space.
	defaultMappedBytes = 1 << 42
	// defaultDMBytes: sixteen of the largest blocks (verbs.MaxDMSize).
	defaultDMBytes = 16 * verbs.MaxDMSize
)

// withDefaults fills the zero fields: a quarter of each bounded pool, and
// of the daemon's fds and mappings a sixteenth (nofile is the daemon's
// RLIMIT_NOFILE, maps vm.max_map_count).
func (l Limits) withDefaults(nofile, maps uint64) Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.QPs, verbs.MaxQP/poolShare)
	def(&l.MRs, mrKeyIndices/poolShare)
	def(&l.MWs, mwKeyIndices/poolShare)
	def(&l.AHs, verbs.MaxAH/poolShare)
	def(&l.PDs, 4096)
	def(&l.CQs, 1024)
	def(&l.SRQs, 1024)
	def(&l.CMIDs, 4096)
	def(&l.CMChannels, 256)
	def(&l.Resolutions, 64)
	def(&l.FDs, int(min(max(nofile/16, 64), 4096)))
	def(&l.Mappings, int(min(max(maps/16, 256), 8192)))
	def(&l.DMs, 64)
	if l.DMBytes == 0 {
		l.DMBytes = defaultDMBytes
	}
	if l.MappedBytes == 0 {
		l.MappedBytes = defaultMappedBytes
	}
	if l.ResolveTimeout <= 0 {
		l.ResolveTimeout = maxResolveTimeout
	}
	return l
}

// systemLimits raises the daemon's RLIMIT_NOFILE soft limit to its hard
// limit (a daemon serving many clients needs them: Go raises it at start,
// but whoever embeds the server may have lowered it since) and reads it and
// vm.max_map_count, which size the clients' shares.
func systemLimits() (nofile, maps uint64, err error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0, fmt.Errorf("daemon: RLIMIT_NOFILE: %w", err)
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
			return 0, 0, fmt.Errorf("daemon: raising RLIMIT_NOFILE to %d: %w", r.Max, err)
		}
	}
	maps = 65530 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			maps = v
		}
	}
	return r.Cur, maps, nil
}

// unprivilegedPortStart is net.ipv4.ip_unprivileged_port_start of the
// daemon's network namespace: binding a lower port needs
// CAP_NET_BIND_SERVICE (the kernel's inet_prot_sock, which cma_get_port
// checks).
func unprivilegedPortStart() uint16 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
	if err != nil {
		return 1024
	}
	return uint16(v)
}

// Capability bits of /proc/PID/status's CapEff.
const (
	capNetBindService = 10
	capIPCLock        = 14
)

// account is what a client holds, shared by its sessions. A process has
// one, for its RLIMIT_MEMLOCK (the kernel counts pinned pages per address
// space); the shares of the pools are a process's if it is privileged (root
// or the daemon's user), else its user's: an unprivileged user gets no
// second share by attaching again or forking.
type account struct {
	lim Limits
	// memlock is a process's RLIMIT_MEMLOCK in bytes (math.MaxUint64 for
	// none), caps its effective capabilities, both read at attach.
	memlock uint64
	caps    uint64

	mu        sync.Mutex
	sessions  int
	n         [objKinds]int // objects by kind (objMR counts shared ones too)
	pages     uint64        // a process's pages counted against memlock
	mapped    uint64        // bytes of shared regions the daemon maps
	dmBytes   uint64        // bytes of device memory (dm.go)
	resolving map[*rdmacm.ID]struct{}
}

// acctKey names an account: a process's (its pid) or a user's (its uid).
type acctKey struct {
	user bool
	id   int
}

// usage is a session's part of its accounts; the session's goroutine
// alone uses it.
type usage struct {
	lim        Limits
	proc, pool *account // the process's (memlock, capabilities); the shares'
	// procKey and poolKey name them in the server's accounts.
	procKey, poolKey acctKey
	held             [objKinds]int
	// pins is what each registered region counts, by handle: its pages
	// against memlock, the bytes the daemon maps of it (shared regions).
	pins    map[uint32]pinnedMR
	dmBytes uint64 // of device memory held (dm.go)
	left    bool
}

type pinnedMR struct{ pages, mapped uint64 }

// join makes the usage of a session of p's.
func (s *Server) join(p ipc.Peer, privileged bool) *usage {
	fresh := newAccount(s.cfg.Limits, p.PID) // /proc is read outside the lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accounts == nil {
		s.accounts = map[acctKey]*account{} // a server made without New (the fuzzer's)
	}
	get := func(k acctKey) *account {
		a := s.accounts[k]
		if a == nil {
			a = &account{lim: fresh.lim, memlock: fresh.memlock, caps: fresh.caps}
			s.accounts[k] = a
		}
		a.mu.Lock()
		a.sessions++
		a.mu.Unlock()
		return a
	}
	u := &usage{procKey: acctKey{id: p.PID}, pins: map[uint32]pinnedMR{}}
	u.poolKey = u.procKey
	if !privileged {
		u.poolKey = acctKey{user: true, id: int(p.UID)}
	}
	u.proc = get(u.procKey)
	u.pool = u.proc
	if u.poolKey != u.procKey {
		u.pool = get(u.poolKey)
	}
	u.lim = u.pool.lim
	return u
}

// leave gives back what u held (its session released it) and forgets an
// account once no session of its process or user remains.
func (s *Server) leave(u *usage) {
	if u.left {
		return
	}
	u.left = true
	s.forgetDMCharges(u)
	s.mu.Lock()
	defer s.mu.Unlock()
	u.pool.mu.Lock()
	for k, n := range u.held {
		u.pool.n[k] -= n
	}
	for _, pin := range u.pins {
		u.pool.mapped -= pin.mapped
	}
	u.pool.dmBytes -= u.dmBytes
	u.pool.mu.Unlock()
	u.proc.mu.Lock()
	for _, pin := range u.pins {
		u.proc.pages -= pin.pages
	}
	u.proc.mu.Unlock()
	u.held, u.pins, u.dmBytes = [objKinds]int{}, map[uint32]pinnedMR{}, 0
	for k, a := range map[acctKey]*account{u.procKey: u.proc, u.poolKey: u.pool} {
		a.mu.Lock()
		a.sessions--
		if a.sessions == 0 && s.accounts[k] == a {
			delete(s.accounts, k)
		}
		a.mu.Unlock()
	}
}

// took counts an object of kind k the session created, gave one it
// destroyed.
func (u *usage) took(k objKind) { u.add(k, 1) }
func (u *usage) gave(k objKind) { u.add(k, -1) }

func (u *usage) add(k objKind, d int) {
	u.held[k] += d
	u.pool.mu.Lock()
	u.pool.n[k] += d
	if k == objSharedMR {
		u.pool.n[objMR] += d
	}
	u.pool.mu.Unlock()
}

func (u *usage) capable(bit uint) bool { return u.proc.caps&(1<<bit) != 0 }

// mayResolve reports whether the client may start one more address
// resolution: ENOMEM past its share of resolutions in progress.
func (u *usage) mayResolve() error {
	a := u.pool
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.resolving {
		if !id.Resolving() {
			delete(a.resolving, id)
		}
	}
	if len(a.resolving) >= u.lim.Resolutions {
		return syscall.ENOMEM
	}
	return nil
}

// resolves counts id's resolution, which mayResolve allowed.
func (u *usage) resolves(id *rdmacm.ID) {
	a := u.pool
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resolving == nil {
		a.resolving = map[*rdmacm.ID]struct{}{}
	}
	a.resolving[id] = struct{}{}
}

// newAccount reads the client's RLIMIT_MEMLOCK and effective capabilities,
// as the kernel checks them at ibv_reg_mr and rdma_bind_addr. A client
// whose values cannot be read gets neither a memlock allowance nor a
// capability.
func newAccount(lim Limits, pid int) *account {
	// A server made without New (the fuzzer's) has its defaults here.
	a := &account{lim: lim.withDefaults(1024, 65530)}
	var r unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &r); err == nil {
		a.memlock = r.Cur
	} else {
		// Without CAP_SYS_RESOURCE (a daemon in a container) prlimit may
		// not read another user's limits; /proc/PID/limits is readable.
		a.memlock = memlockOf(pid)
	}
	if a.memlock == unix.RLIM_INFINITY {
		a.memlock = math.MaxUint64
	}
	a.caps = effectiveCaps(pid)
	return a
}

// memlockOf is the soft RLIMIT_MEMLOCK of /proc/PID/limits, 0 if it cannot
// be read.
func memlockOf(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Max locked memory"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			if f[0] == "unlimited" {
				return unix.RLIM_INFINITY
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// effectiveCaps is /proc/PID/status's CapEff, 0 if it cannot be read.
func effectiveCaps(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0
			}
			return c
		}
	}
	return 0
}

// pages is how many pages [addr, addr+length) spans, as ib_umem_get
// counts them.
func pages(addr, length uint64) (uint64, error) {
	page := uint64(os.Getpagesize())
	end := addr + length
	if end < addr || end > math.MaxUint64-page {
		return 0, syscall.EINVAL
	}
	return (end + page - 1 - addr&^(page-1)) / page, nil
}

// mayPin reports whether the client may register one more region (of kind
// k) of [addr, addr+length): its share of regions, and its pages against
// its RLIMIT_MEMLOCK, ENOMEM past it unless it has CAP_IPC_LOCK, as the
// kernel's ib_umem_get. Checked before anything is mapped.
func (ss *session) mayPin(k objKind, addr, length uint64) error {
	if err := ss.room(k); err != nil {
		return err
	}
	n, err := pages(addr, length)
	if err != nil {
		return err
	}
	u := ss.acct
	u.proc.mu.Lock()
	over := !u.capable(capIPCLock) && u.proc.pages+n > u.proc.memlock/uint64(os.Getpagesize())
	u.proc.mu.Unlock()
	if over {
		return syscall.ENOMEM
	}
	u.pool.mu.Lock()
	defer u.pool.mu.Unlock()
	if k == objSharedMR && u.pool.mapped+length > u.lim.MappedBytes {
		return syscall.ENOMEM
	}
	return nil
}

// pin counts registered region h (mapped: a shared one) against the
// client's RLIMIT_MEMLOCK and shares (mayPin allowed it).
func (u *usage) pin(h uint32, addr, length uint64, mapped bool) {
	n, _ := pages(addr, length)
	p := pinnedMR{pages: n}
	k := objMR
	if mapped {
		p.mapped, k = length, objSharedMR
	}
	u.pins[h] = p
	u.took(k)
	u.proc.mu.Lock()
	u.proc.pages += p.pages
	u.proc.mu.Unlock()
	u.pool.mu.Lock()
	u.pool.mapped += p.mapped
	u.pool.mu.Unlock()
}

// unpin stops counting region h.
func (u *usage) unpin(h uint32) {
	p, ok := u.pins[h]
	if !ok {
		return
	}
	delete(u.pins, h)
	k := objMR
	if p.mapped > 0 {
		k = objSharedMR
	}
	u.gave(k)
	u.proc.mu.Lock()
	u.proc.pages -= p.pages
	u.proc.mu.Unlock()
	u.pool.mu.Lock()
	u.pool.mapped -= p.mapped
	u.pool.mu.Unlock()
}

// bindPort refuses a port below the unprivileged range to a client
// without CAP_NET_BIND_SERVICE: EACCES, as cma_get_port.
func (ss *session) bindPort(port uint16) error {
	if port != 0 && port < ss.srv.privPorts && !ss.acct.capable(capNetBindService) {
		return syscall.EACCES
	}
	return nil
}

// objKind is what a request would create.
type objKind uint8

const (
	objPD objKind = iota
	objMR
	objSharedMR // a region of a memfd: a mapping too
	objMW
	objCQ
	objQP
	objSRQ
	objAH
	objCMID
	objCMChannel
	objDM       // device memory: a map's fd and a mapping (dm.go)
	objDoorbell // a doorbell for an engine besides engine 0 (DOORBELL): an fd
	objSession  // a connection (checked once it is counted)
	objKinds
)

// sessionFDs is what a session costs the daemon: its connection, its
// event queue's pipe, its doorbell, and its process's pidfd, /proc
// directory, mem and maps.
const sessionFDs = 7

// room reports whether the client may create one more object of kind k:
// ENOMEM past its share of the pool (EMFILE past its share of the
// daemon's fds). Sessions of one process share one share.
func (ss *session) room(k objKind) error {
	a := ss.acct.pool
	l := &ss.acct.lim
	a.mu.Lock()
	defer a.mu.Unlock()
	n := &a.n
	fds := sessionFDs*a.sessions + n[objCQ] + n[objCMChannel] + n[objDM] + n[objDoorbell]
	maps := n[objCQ] + 2*n[objQP] + n[objSRQ] + n[objSharedMR] + n[objDM]
	most := [objKinds]int{objPD: l.PDs, objMR: l.MRs, objSharedMR: l.MRs, objMW: l.MWs, objCQ: l.CQs, objQP: l.QPs,
		objSRQ: l.SRQs, objAH: l.AHs, objCMID: l.CMIDs, objCMChannel: l.CMChannels, objDM: l.DMs,
		objDoorbell: math.MaxInt}[k] // doorbells: one per engine per session, and fds
	have := n[k]
	if k == objSharedMR {
		have = n[objMR]
	}
	needFDs := [objKinds]int{objCQ: 1, objCMChannel: 1, objDM: 1, objDoorbell: 1}[k]
	needMaps := [objKinds]int{objSharedMR: 1, objCQ: 1, objQP: 2, objSRQ: 1, objDM: 1}[k]
	switch {
	case fds+needFDs > l.FDs:
		return syscall.EMFILE
	case k == objSession:
		return nil
	case have >= most, maps+needMaps > l.Mappings:
		return syscall.ENOMEM
	}
	return nil
}

// resolveTimeout is a client's resolution timeout in ms, capped: a client
// may not hold the daemon's resolutions for days.
func (ss *session) resolveTimeout(ms uint32) time.Duration {
	return min(time.Duration(ms)*time.Millisecond, ss.acct.lim.ResolveTimeout)
}
