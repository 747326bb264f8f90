package daemon

import (
	"errors"
	"os"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// Device memory through the daemon (issue 34): the daemon allocates each
// block (a BPF_F_MMAPABLE array map of its own, zeroed) and passes the
// client a dup of the map's fd, which the client maps; a region over it is
// the daemon's region over its own mapping of the same pages, so the
// engines (and the XDP program) and the client share them. The fd names
// that one map: mapping it reaches the block's pages only, and bpf(2) on
// it (which an unprivileged client may not call at all where unprivileged
// BPF is off) only its elements. Each block is a fresh map, so no page a
// client once held is ever another's.

// A block's pages outlive FREE_DM while its client maps them (or holds a
// dup of its fd, or a child does): the daemon cannot revoke a map's mmap.
// So a freed block stays charged to the client's share (its pool: the
// process, or the user for the unprivileged) until the kernel has freed
// the map, which the daemon sees as its ID no longer resolving. The bytes
// of device memory a client's pool keeps alive, held by the daemon or only
// mapped, are then at most DMBytes for as long as any of them lives,
// across sessions. A daemon that may not look map IDs up (BPF_MAP_GET_FD_BY_ID
// needs CAP_SYS_ADMIN) keeps an unprivileged client's charge, across
// sessions, until no process of its user is left (dmuser.go), and a
// privileged client's until the session that freed the block ends. Charges
// are whole pages, what the kernel allocates: a byte's block costs a page.

// dmRequest runs ALLOC_DM, FREE_DM or REG_DM_MR.
func (ss *session) dmRequest(op uverbs.Op, d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	switch op {
	case uverbs.OpAllocDM:
		return ss.allocDM(d, e)
	case uverbs.OpFreeDM:
		return nil, ss.freeDM(d)
	}
	return nil, ss.regDMMR(d, e)
}

func (ss *session) allocDM(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	var r uverbs.AllocDM
	d.Get(&r)
	if err := d.End(); err != nil {
		return nil, err
	}
	if r.Length == 0 || r.Length > verbs.MaxDMSize {
		return nil, syscall.EINVAL // as mlx5: past the device's max_dm_size
	}
	if err := ss.mayAllocDM(r.Length); err != nil {
		return nil, err
	}
	dm, err := ss.srv.cfg.Device.AllocDM(int(r.Length))
	if err != nil {
		return nil, err
	}
	fd, err := dm.DupFD()
	if err != nil {
		_ = dm.Free()
		return nil, err
	}
	h := ss.handle32()
	ss.dms[h] = dm
	ss.acct.took(objDM)
	ss.acct.heldDM(int64(dmCharge(r.Length)))
	pages := (r.Length + loader.DMPage - 1) / loader.DMPage
	e.Put(&uverbs.DMCreated{DM: h, MapLength: pages * loader.DMPage})
	return []int{fd}, nil
}

func (ss *session) freeDM(d *uverbs.Decoder) error {
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	dm := ss.dms[h]
	if dm == nil {
		return syscall.EINVAL
	}
	id := dmMapID(dm)
	if err := dm.Free(); err != nil {
		return err // EBUSY: a region lies in it
	}
	delete(ss.dms, h)
	ss.acct.gave(objDM)
	ss.acct.heldDM(-int64(dmCharge(uint64(dm.Len()))))
	ss.srv.keepDMCharge(ss.acct, id, dmCharge(uint64(dm.Len())))
	return nil
}

func (ss *session) regDMMR(d *uverbs.Decoder, e *uverbs.Encoder) error {
	pdh, dmh := d.Ref(), d.Ref()
	var r uverbs.RegDMMR
	d.Get(&r)
	if err := d.End(); err != nil {
		return err
	}
	pd, dm := ss.pds[pdh], ss.dms[dmh]
	if pd == nil || dm == nil || r.Offset > uint64(dm.Len()) || r.Length > uint64(dm.Len()) {
		return syscall.EINVAL
	}
	if err := ss.room(objMR); err != nil {
		return err
	}
	mr, err := pd.RegDMMR(dm, int(r.Offset), int(r.Length), verbs.Access(r.Access))
	if err != nil {
		return err
	}
	h := ss.handle32()
	ss.mrs[h] = &sharedMR{mr: mr, pd: pdh}
	ss.acct.pin(h, 0, 0, false) // counted as a region; its pages are device memory's
	e.Put(&uverbs.MRCreated{MR: h, LKey: mr.LKey(), RKey: mr.RKey()})
	return nil
}

// mayAllocDM reports whether the client may have length more bytes of
// device memory: ENOMEM past its share of blocks or bytes (as mlx5), the
// bytes of its freed blocks still alive counted.
func (ss *session) mayAllocDM(length uint64) error {
	if err := ss.room(objDM); err != nil {
		return err
	}
	u, s := ss.acct, ss.srv
	s.dmMu.Lock()
	defer s.dmMu.Unlock()
	u.pool.mu.Lock()
	defer u.pool.mu.Unlock()
	want := u.pool.dmBytes + dmCharge(length)
	// Looking up whether freed blocks are gone costs a system call each:
	// only when the share would otherwise be full.
	if want+s.freedDMBytes(u.poolKey, false) > u.lim.DMBytes && want+s.freedDMBytes(u.poolKey, true) > u.lim.DMBytes {
		return syscall.ENOMEM
	}
	return nil
}

// dmCharge is what n bytes of device memory cost the client: whole pages.
func dmCharge(n uint64) uint64 { return (n + loader.DMPage - 1) / loader.DMPage * loader.DMPage }

// freedDM is a block the daemon freed whose pages its client may still map.
type freedDM struct {
	id    ebpf.MapID // 0 where unknown
	bytes uint64
	owner *usage // the session that freed it; nil once it ended (dmuser.go)
	// orphan numbers the charges left by their sessions, in order
	// (Server.dmOrphans), for an unprivileged client where the map cannot
	// be looked up.
	orphan uint64
}

// dmMapID is the ID of the map holding dm, 0 if it cannot be had.
func dmMapID(dm *verbs.DM) ebpf.MapID {
	fd, err := dm.DupFD()
	if err != nil {
		return 0
	}
	m, err := ebpf.NewMapFromFD(fd) // owns fd
	if err != nil {
		unix.Close(fd)
		return 0
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

// dmMapGone reports whether the map of ID id is gone, and whether that
// could be known (not without CAP_SYS_ADMIN).
func dmMapGone(id ebpf.MapID) (gone, known bool) {
	if id == 0 {
		return false, false
	}
	m, err := ebpf.NewMapFromID(id)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
		return true, true
	}
	if err != nil {
		return false, false
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return false, false
	}
	// IDs are reused only once the kernel's cyclic IDR wraps: a map of
	// another kind under the ID means the block's is gone.
	return info.Type != ebpf.Array || info.ValueSize != loader.DMPage || info.Flags&unix.BPF_F_MMAPABLE == 0, true
}

// mapGoneOf is s.mapGone, or dmMapGone for a server made without New (the
// fuzzer's).
func (s *Server) mapGoneOf(id ebpf.MapID) (gone, known bool) {
	if s.mapGone == nil {
		return dmMapGone(id)
	}
	return s.mapGone(id)
}

// keepDMCharge charges a freed block of bytes to u's pool until its map
// (id) is gone.
func (s *Server) keepDMCharge(u *usage, id ebpf.MapID, bytes uint64) {
	s.dmMu.Lock()
	defer s.dmMu.Unlock()
	if s.dmFreed == nil {
		s.dmFreed = map[acctKey][]freedDM{}
	}
	s.dmFreed[u.poolKey] = append(s.dmFreed[u.poolKey], freedDM{id: id, bytes: bytes, owner: u})
}

// freedDMBytes is what key's freed blocks still cost, after forgetting
// those whose maps are gone if prune. The caller holds s.dmMu.
func (s *Server) freedDMBytes(key acctKey, prune bool) uint64 {
	var n uint64
	s.keepFreedDM(key, func(f *freedDM) bool {
		if prune {
			if gone, _ := s.mapGoneOf(f.id); gone {
				return false
			}
		}
		n += f.bytes
		return true
	})
	return n
}

// forgetDMCharges, as session u ends, drops the charges of its pool's
// freed blocks that are gone, and of u's whose maps cannot be looked up
// (a privileged client's last as long as its session; an unprivileged
// client's wait for its user's processes to end, dmuser.go): what stays
// is what is alive.
func (s *Server) forgetDMCharges(u *usage) {
	s.dmMu.Lock()
	defer s.dmMu.Unlock()
	s.keepFreedDM(u.poolKey, func(f *freedDM) bool {
		gone, known := s.mapGoneOf(f.id)
		switch {
		case gone:
			return false
		case known || f.owner != u:
			return true
		case !u.poolKey.user:
			return false
		}
		s.dmOrphans++
		f.owner, f.orphan = nil, s.dmOrphans
		s.watchUserDM(u.poolKey)
		return true
	})
}

// keepFreedDM keeps those of key's freed blocks keep says to (keep may
// change them). The caller holds s.dmMu.
func (s *Server) keepFreedDM(key acctKey, keep func(*freedDM) bool) {
	fs := s.dmFreed[key]
	kept := fs[:0]
	for _, f := range fs {
		if keep(&f) {
			kept = append(kept, f)
		}
	}
	clear(fs[len(kept):])
	if len(kept) == 0 {
		delete(s.dmFreed, key)
	} else {
		s.dmFreed[key] = kept
	}
}

// heldDM counts n more bytes of device memory (fewer, negative).
func (u *usage) heldDM(n int64) {
	u.dmBytes += uint64(n)
	u.pool.mu.Lock()
	u.pool.dmBytes += uint64(n)
	u.pool.mu.Unlock()
}

// releaseDM frees the departed client's device memory (its regions are
// deregistered first): a block a region would not leave stays, as the
// regions do.
func (ss *session) releaseDM() {
	for h, dm := range ss.dms {
		id := dmMapID(dm)
		if err := dm.Free(); err != nil {
			ss.srv.log.Error("daemon: freeing a departed client's device memory", "err", err)
			continue
		}
		delete(ss.dms, h)
		// The client (or a child) may map it still: charged as if freed.
		ss.srv.keepDMCharge(ss.acct, id, dmCharge(uint64(dm.Len())))
	}
}
