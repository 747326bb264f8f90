package ibv

import "fmt"

// WRShape is what the check of a send work request looks at: each
// provider fills it from its own work request, so both check alike (a
// daemon's client before it writes a ring slot, the in-process provider
// before it queues, and the daemon again when it takes the slot).
type WRShape struct {
	ID         uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGList     []SGE
	RemoteAddr uint64
	RemoteQPN  uint32
	// AH: the request names an address handle; AHBad: a destroyed one,
	// or another device's.
	AH, AHBad bool
	// Bind: the request has a bind; BindMW: naming a window; BindForeign:
	// a window or region of another device.
	Bind, BindMW, BindForeign bool
}

// CheckSendWR is the provider's check of a send work request for a QP of
// type typ with capabilities c on a port of MTU mtu (rxe's post_one_send
// and validate_send_wr): it returns the message's length.
func CheckSendWR(wr *WRShape, typ QPType, c *QPCap, mtu int) (uint32, error) {
	bad := func(why string) (uint32, error) {
		return 0, fmt.Errorf("verbs: send WR %d: %s: %w", wr.ID, why, ErrInvalid)
	}
	if typ == QPTypeUD {
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
			return bad(fmt.Sprintf("opcode %d on a UD QP (SEND and SEND_WITH_IMM only)", wr.Opcode))
		}
		if !wr.AH || wr.AHBad {
			return bad("a UD send needs a live address handle of the QP's device")
		}
		if wr.RemoteQPN > 0xffffff {
			return bad(fmt.Sprintf("remote QPN %#x", wr.RemoteQPN))
		}
	} else if wr.AH {
		return bad("an address handle on a connected QP")
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
	case WRLocalInv:
		if wr.Flags&SendInline != 0 {
			return bad("LOCAL_INV cannot be inline")
		}
		return 0, nil
	case WRBindMW:
		if !wr.Bind || !wr.BindMW {
			return bad("BIND_MW without a memory window")
		}
		if wr.BindForeign {
			return bad("memory window or region of another device")
		}
		if wr.Flags&SendInline != 0 {
			return bad("BIND_MW cannot be inline")
		}
		return 0, nil
	case WRSendWithInv, WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if typ != QPTypeRC {
			return bad("opcode needs an RC QP")
		}
	default:
		return bad(fmt.Sprintf("unknown opcode %d", wr.Opcode))
	}
	if len(wr.SGList) > c.MaxSendSGE {
		return bad(fmt.Sprintf("%d SGEs, QP allows %d", len(wr.SGList), c.MaxSendSGE))
	}
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	if total > MaxMsgSize {
		return bad(fmt.Sprintf("message of %d bytes", total))
	}
	if typ == QPTypeUD && int(total) > mtu {
		return bad(fmt.Sprintf("a UD message of %d bytes, over the port's MTU %d", total, mtu))
	}
	if wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAdd {
		if len(wr.SGList) != 1 || wr.SGList[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return bad("an atomic needs one 8-byte SGE and an 8-byte aligned remote address")
		}
	}
	if wr.Flags&SendInline != 0 {
		if wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAdd || int(total) > c.MaxInlineData {
			return bad(fmt.Sprintf("inline %d bytes (max %d) or on a READ/atomic", total, c.MaxInlineData))
		}
	}
	return uint32(total), nil
}
