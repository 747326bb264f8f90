package verbs

import "fmt"

func dumpQP(qp *QP) string {
	var s string
	_ = qp.dev.do(func() error {
		t := &qp.t
		s = fmt.Sprintf("state %v reqIdx %d reqPSN %#x compPSN %#x ePSN %#x rdOut %d timer %v rnr %v retry %d sq:", t.state, t.reqIdx, t.reqPSN, t.compPSN, t.ePSN, t.rdAtomicOut, t.timerAt, t.rnrAt, t.retryLeft)
		for _, r := range t.res {
			if r.valid {
				s += fmt.Sprintf(" res{%#x-%#x len %d atomic %v}", r.firstPSN, r.lastPSN, r.length, r.atomic)
			}
		}
		for _, w := range t.sq {
			s += fmt.Sprintf(" {op %d len %d first %#x last %#x started %v sentAll %v off %d readDone %d}", w.wr.Opcode, w.length, w.firstPSN, w.lastPSN, w.started, w.sentAll, w.sentOff, w.readDone)
		}
		return nil
	})
	return s
}

func counters(d *Device) Counters { c, _ := d.Counters(); return c }
