package verbs

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestQueryDevicePortGID: QueryDevice reports the limits the device
// enforces and a node GUID built from the MAC (EUI-64, as rxe); QueryPort
// and QueryGID report the configured port: active MTU, GID table.
func TestQueryDevicePortGID(t *testing.T) {
	la, _ := memlink.NewPair(5000)
	gids := []netip.Addr{mustAddr("fe80::ff:fe00:1"), mustAddr("::ffff:198.18.0.1"), mustAddr("2001:db8::1")}
	cfg := DeviceConfig{MAC: net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}, GIDs: gids, ActiveMTU: 1024}
	d, err := NewDevice(la, cfg)
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })

	da := d.QueryDevice()
	want := DeviceAttr{MaxQP: MaxQP, MaxQPWR: MaxQPWR, MaxSGE: MaxSGE, MaxCQE: MaxCQE, MaxInlineData: MaxInlineData,
		MaxMRSize: MaxMRSize, MaxMsgSize: MaxMsgSize, MaxQPRdAtom: MaxRdAtomic, MaxQPInitRdAtom: MaxRdAtomic,
		NodeGUID: 0x001122fffe334455} // 02:11:22:33:44:55 with the U/L bit flipped and ff:fe in the middle
	// max_dm_size is MaxDMSize exactly where device memory can be had (the
	// kernel gives mmapable array maps), else 0.
	if dm, err := d.AllocDM(MaxDMSize); err == nil {
		want.MaxDMSize = MaxDMSize
		_ = dm.Free()
	} else if !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("AllocDM(%d): %v", MaxDMSize, err)
	}
	if da != want {
		t.Fatalf("QueryDevice: %+v\nwant %+v", da, want)
	}

	pa := d.QueryPort()
	if pa.State != "ACTIVE" || pa.MaxMTU != MTU4096 || pa.ActiveMTU != MTU1024 || pa.ActiveMTU.Bytes() != cfg.ActiveMTU || pa.GIDTblLen != len(gids) {
		t.Fatalf("QueryPort: %+v", pa)
	}
	for i, g := range gids {
		got, err := d.QueryGID(i)
		if err != nil || got != g {
			t.Fatalf("QueryGID(%d) = %v, %v; want %v", i, got, err, g)
		}
	}
	for _, i := range []int{-1, len(gids)} {
		if _, err := d.QueryGID(i); !isErr(err, ErrInvalid) {
			t.Fatalf("QueryGID(%d): %v, want EINVAL", i, err)
		}
	}

	// The reported limits are the ones enforced.
	pd, err := d.AllocPD()
	must(t, err)
	cq, err := d.CreateCQ(16)
	must(t, err)
	if _, err := d.CreateCQ(da.MaxCQE + 1); !isErr(err, ErrInvalid) {
		t.Errorf("CreateCQ(max_cqe+1): %v", err)
	}
	for _, c := range []QPCap{
		{MaxSendWR: da.MaxQPWR + 1},
		{MaxSendWR: 1, MaxRecvWR: da.MaxQPWR + 1},
		{MaxSendWR: 1, MaxSendSGE: da.MaxSGE + 1},
		{MaxSendWR: 1, MaxRecvSGE: da.MaxSGE + 1},
		{MaxSendWR: 1, MaxInlineData: da.MaxInlineData + 1},
	} {
		if _, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: c}); !isErr(err, ErrInvalid) {
			t.Errorf("CreateQP with %+v beyond the device: %v", c, err)
		}
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: da.MaxQPWR, MaxRecvWR: da.MaxQPWR, MaxSendSGE: da.MaxSGE, MaxRecvSGE: da.MaxSGE, MaxInlineData: da.MaxInlineData}})
	must(t, err)
	must(t, qp.Modify(QPAttr{State: StateInit, Port: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	rtr := func(mtu MTU, sgid int, rd uint8) error {
		return qp.Modify(QPAttr{State: StateRTR, AH: AH{DGID: mustAddr("2001:db8::2"), SGIDIndex: sgid, DMAC: macB}, PathMTU: mtu,
			DestQPN: 0x20, MaxDestRdAtomic: rd, MinRNRTimer: 1},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer)
	}
	if err := rtr(pa.ActiveMTU+1, pa.GIDTblLen-1, 1); !isErr(err, ErrInvalid) {
		t.Errorf("path MTU above the port's active MTU: %v", err)
	}
	if err := rtr(pa.ActiveMTU, pa.GIDTblLen, 1); !isErr(err, ErrInvalid) {
		t.Errorf("SGID index past the GID table: %v", err)
	}
	if err := rtr(pa.ActiveMTU, pa.GIDTblLen-1, uint8(da.MaxQPRdAtom+1)); !isErr(err, ErrInvalid) {
		t.Errorf("max_dest_rd_atomic above the device's: %v", err)
	}
	must(t, rtr(pa.ActiveMTU, pa.GIDTblLen-1, uint8(da.MaxQPRdAtom)))
	got, err := qp.Query()
	must(t, err)
	if got.Cap.MaxInlineData != da.MaxInlineData || got.PathMTU != pa.ActiveMTU || got.State != StateRTR {
		t.Fatalf("Query: %+v", got)
	}
}
