package ibv

// QKeyControlled is the top bit of a Q_Key. In a work request's Q_Key it
// sends the QP's own Q_Key instead (IBTA 10.2.5); a QP's own Q_Key with it
// set is a controlled one, which only privileged processes may give a QP.
const QKeyControlled = 1 << 31

// QP1, the General Services Interface QP: the UD QP every node has under
// a fixed number, which carries the Communication Manager's MADs, all with
// one Q_Key (IBTA 13.5; rxe's GSI QP).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// MaxAH is how many address handles a device holds at once (rxe_param.h's
// RXE_MAX_AH).
const MaxAH = 1<<15 - 1

// Multicast limits, rxe_param.h's: groups on the device (RXE_MAX_MCAST_GRP),
// QPs attached to one group (RXE_MAX_MCAST_QP_ATTACH) and attachments in
// all (RXE_MAX_TOT_MCAST_QP_ATTACH). Past one, an attach fails ENOMEM.
const (
	MaxMcastGroups      = 8192
	MaxMcastQPAttach    = 56
	MaxTotalMcastAttach = 0x70000
)
