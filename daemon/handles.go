package daemon

// live reports whether any object of the session has handle h, whatever
// its kind: handles are one namespace, so a stale one never names a newer
// object of another kind either.
func (ss *session) live(h uint32) bool {
	if _, ok := ss.ahs.Load(h); ok {
		return true
	}
	_, pd := ss.pds[h]
	_, mr := ss.mrs[h]
	_, cq := ss.cqs[h]
	_, qp := ss.qps[h]
	_, srq := ss.srqs[h]
	_, mw := ss.mws[h]
	_, dm := ss.dms[h]
	_, ch := ss.cm.channels[h]
	_, id := ss.cm.ids[h]
	return pd || mr || cq || qp || srq || mw || dm || ch || id
}
