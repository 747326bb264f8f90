package verbs

import (
	"fmt"
	"runtime/debug"

	"github.com/xdproce/xdproce/wire"
)

func init() {
	dbgResp = func(qp *QP, psn uint32, code wire.NAKCode, st WCStatus) {
		fmt.Printf("RESPERR qpn %d psn %#x code %v st %v ePSN %#x respOp %d rx op %v psn %#x len %d reth %+v\n%s\n", qp.qpn, psn, code, st, qp.t.ePSN, qp.t.respOp, qp.dev.e.rx.BTH.Opcode, qp.dev.e.rx.BTH.PSN, len(qp.dev.e.rx.Payload), qp.dev.e.rx.RETH, debug.Stack())
	}
}
