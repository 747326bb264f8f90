package ibv

// SRQInitAttr creates a shared receive queue (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms the limit event at creation; 0 leaves it disarmed.
	Limit int
}

// SRQAttr are an SRQ's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// SRQAttrMask selects what ModifySRQ changes (ibv_srq_attr_mask values).
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize
	SRQAttrLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm the limit event
)
