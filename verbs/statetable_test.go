package verbs

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/xdproce/xdproce/link/memlink"
)

// TestQPStateTable checks Modify against ibverbs' qp_state_table (the
// kernel's ib_modify_qp_is_ok) for every (from, to) pair of states, for RC
// and UC: a legal transition with its required attributes succeeds, an
// illegal one fails with EINVAL, and so does a legal one missing any one of
// its required attributes; a failed Modify leaves the state alone.
func TestQPStateTable(t *testing.T) {
	states := []QPState{StateReset, StateInit, StateRTR, StateRTS, StateSQD, StateSQE, StateErr}
	legal := map[QPState][]QPState{
		StateReset: {StateReset, StateInit, StateErr},
		StateInit:  {StateReset, StateInit, StateRTR, StateErr},
		StateRTR:   {StateReset, StateRTS, StateErr},
		StateRTS:   {StateReset, StateRTS, StateSQD, StateErr},
		StateSQD:   {StateReset, StateRTS, StateSQD, StateErr},
		StateSQE:   {StateReset, StateRTS, StateErr},
		StateErr:   {StateReset, StateErr},
	}
	type edge struct{ from, to QPState }
	required := map[QPType]map[edge]AttrMask{
		QPTypeRC: {
			{StateReset, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			{StateInit, StateRTR}:   AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			{StateRTR, StateRTS}:    AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
		},
		QPTypeUC: {
			{StateReset, StateInit}: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			{StateInit, StateRTR}:   AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			{StateRTR, StateRTS}:    AttrSQPSN,
		},
	}
	// Every attribute, with values valid for any transition that takes it.
	all := QPAttr{Port: 1, AccessFlags: AccessLocalWrite | AccessRemoteWrite,
		AH: AH{DGID: ipB, SGIDIndex: 1, DMAC: macB}, PathMTU: MTU1024, DestQPN: 0x99, RQPSN: 1,
		MaxDestRdAtomic: 4, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 2, MaxRdAtomic: 4}

	la, _ := memlink.NewPair(5000)
	d := newDevice(t, la, macA, ipA, 4096)
	pd, err := d.AllocPD()
	must(t, err)
	cq, err := d.CreateCQ(16)
	must(t, err)

	// qpIn returns a new QP of type typ in state s, reached by legal steps
	// (SQE, which only the transport enters, is set directly).
	qpIn := func(t *testing.T, typ QPType, s QPState) *QP {
		t.Helper()
		qp, err := pd.CreateQP(QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		must(t, err)
		t.Cleanup(func() { _ = qp.Destroy() })
		step := func(to QPState, from QPState) {
			t.Helper()
			a := all
			a.State = to
			must(t, qp.Modify(a, AttrState|required[typ][edge{from, to}]))
		}
		path := map[QPState][]QPState{
			StateReset: nil,
			StateInit:  {StateInit},
			StateRTR:   {StateInit, StateRTR},
			StateRTS:   {StateInit, StateRTR, StateRTS},
			StateSQD:   {StateInit, StateRTR, StateRTS, StateSQD},
			StateSQE:   {StateInit, StateRTR, StateRTS},
			StateErr:   {StateErr},
		}[s]
		cur := StateReset
		for _, to := range path {
			step(to, cur)
			cur = to
		}
		if s == StateSQE {
			must(t, d.do(func() error {
				tqp(qp).ForceState(StateSQE)
				return nil
			}))
		}
		if qp.State() != s {
			t.Fatalf("setting up a QP in %v: it is in %v", s, qp.State())
		}
		return qp
	}

	for _, typ := range []QPType{QPTypeRC, QPTypeUC} {
		for _, from := range states {
			for _, to := range states {
				isLegal := false
				for _, s := range legal[from] {
					isLegal = isLegal || s == to
				}
				name := fmt.Sprintf("%v/%v-%v", map[QPType]string{QPTypeRC: "RC", QPTypeUC: "UC"}[typ], from, to)
				t.Run(name, func(t *testing.T) {
					req := required[typ][edge{from, to}]
					a := all
					a.State = to
					qp := qpIn(t, typ, from)
					err := qp.Modify(a, AttrState|req)
					if !isLegal {
						if !isErr(err, ErrInvalid) || qp.State() != from {
							t.Fatalf("illegal transition: Modify returned %v, state %v", err, qp.State())
						}
						return
					}
					if err != nil || qp.State() != to {
						t.Fatalf("legal transition: Modify returned %v, state %v", err, qp.State())
					}
					for m := req; m != 0; m &= m - 1 {
						bit := AttrMask(1) << bits.TrailingZeros32(uint32(m))
						qp := qpIn(t, typ, from)
						if err := qp.Modify(a, AttrState|req&^bit); !isErr(err, ErrInvalid) || qp.State() != from {
							t.Fatalf("without required attribute %#x: Modify returned %v, state %v", uint32(bit), err, qp.State())
						}
					}
				})
			}
		}
	}
}
