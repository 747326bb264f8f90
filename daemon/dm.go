package daemon

import (
	"syscall"

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
	ss.acct.heldDM(int64(r.Length))
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
	if err := dm.Free(); err != nil {
		return err // EBUSY: a region lies in it
	}
	delete(ss.dms, h)
	ss.acct.gave(objDM)
	ss.acct.heldDM(-int64(dm.Len()))
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
// device memory: ENOMEM past its share of blocks or bytes.
func (ss *session) mayAllocDM(length uint64) error {
	if err := ss.room(objDM); err != nil {
		return err
	}
	u := ss.acct
	u.pool.mu.Lock()
	defer u.pool.mu.Unlock()
	if u.pool.dmBytes+length > u.lim.DMBytes {
		return syscall.ENOMEM
	}
	return nil
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
		if err := dm.Free(); err != nil {
			ss.srv.log.Error("daemon: freeing a departed client's device memory", "err", err)
			continue
		}
		delete(ss.dms, h)
	}
}
