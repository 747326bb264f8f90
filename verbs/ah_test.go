package verbs

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/xdproce/xdproce/link/memlink"
)

// neighboursB is a neighbour table that knows B alone: other hosts never
// answer.
func neighboursB(_ context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	if ip == ipB {
		return macB, nil
	}
	return nil, context.DeadlineExceeded
}

// oneLink is one end of an in-memory link.
func oneLink() Link {
	l, _ := memlink.NewPair(9000)
	return l
}

// TestDeallocPDWhileUsed: ibv_dealloc_pd is EBUSY while any region, window,
// QP, SRQ or address handle of the PD exists, and succeeds once they are
// gone.
func TestDeallocPDWhileUsed(t *testing.T) {
	d := newDeviceWith(t, oneLink(), macA, ipA, DeviceConfig{ActiveMTU: 1024, Resolve: neighboursB})
	cq, err := d.CreateCQ(8)
	must(t, err)
	pd, err := d.AllocPD()
	must(t, err)
	must(t, pd.Dealloc())

	type object struct {
		name   string
		create func(*PD) (destroy func() error, err error)
	}
	for _, o := range []object{
		{"region", func(pd *PD) (func() error, error) {
			mr, err := pd.AllocMR(64, AccessLocalWrite)
			return func() error { return mr.Dereg() }, err
		}},
		{"window", func(pd *PD) (func() error, error) {
			mw, err := pd.AllocMW(MWType2)
			return func() error { return mw.Dealloc() }, err
		}},
		{"QP", func(pd *PD) (func() error, error) {
			qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			return func() error { return qp.Destroy() }, err
		}},
		{"SRQ", func(pd *PD) (func() error, error) {
			s, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 1})
			return func() error { return s.Destroy() }, err
		}},
		{"address handle", func(pd *PD) (func() error, error) {
			a, err := pd.CreateAH(AH{DGID: ipB, SGIDIndex: 1})
			return func() error { return a.Destroy() }, err
		}},
	} {
		pd, err := d.AllocPD()
		must(t, err)
		destroy, err := o.create(pd)
		must(t, err)
		if err := pd.Dealloc(); !isErr(err, ErrBusy) {
			t.Errorf("dealloc a PD with a %s: %v, want EBUSY", o.name, err)
		}
		must(t, destroy())
		if err := destroy(); !isErr(err, ErrInvalid) {
			t.Errorf("destroying a %s twice: %v, want EINVAL", o.name, err)
		}
		if err := pd.Dealloc(); err != nil {
			t.Errorf("dealloc a PD whose %s is gone: %v", o.name, err)
		}
	}
}

// TestCreateAH: an address handle resolves its next hop once and is checked
// against the GID table as the kernel checks RoCE address handles.
func TestCreateAH(t *testing.T) {
	d := newDeviceWith(t, oneLink(), macA, ipA, DeviceConfig{ActiveMTU: 1024, Resolve: neighboursB})
	pd, err := d.AllocPD()
	must(t, err)
	ah, err := pd.CreateAH(AH{DGID: ipB, SGIDIndex: 1, HopLimit: 64})
	must(t, err)
	if !bytes.Equal(ah.Attr().DMAC, macB) || ah.PD() != pd || d.AddressHandles() != 1 {
		t.Fatalf("address handle %+v, %d on the device", ah.Attr(), d.AddressHandles())
	}
	given := net.HardwareAddr{2, 0, 0, 0, 0, 0xc}
	ah2, err := pd.CreateAH(AH{DGID: mustAddr("198.18.0.77"), SGIDIndex: 1, DMAC: given})
	must(t, err)
	if !bytes.Equal(ah2.Attr().DMAC, given) {
		t.Fatalf("a given MAC address is kept: %v", ah2.Attr().DMAC)
	}
	for _, bad := range []struct {
		name string
		ah   AH
		want error
	}{
		{"IPv4 destination from the IPv6 GID", AH{DGID: ipB, SGIDIndex: 0}, ErrInvalid},
		{"a 4-byte MAC address", AH{DGID: ipB, SGIDIndex: 1, DMAC: net.HardwareAddr{1, 2, 3, 4}}, ErrInvalid},
		{"a neighbour that never answers", AH{DGID: mustAddr("198.18.0.99"), SGIDIndex: 1}, syscall.ETIMEDOUT},
	} {
		if _, err := pd.CreateAH(bad.ah); !isErr(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.want)
		}
	}
	must(t, ah.Destroy())
	must(t, ah2.Destroy())
	if n := d.AddressHandles(); n != 0 {
		t.Fatalf("%d address handles after destroying both", n)
	}
}
