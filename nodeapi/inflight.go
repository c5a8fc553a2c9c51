package nodeapi

// Work in flight on one key (fsm/inflightread.go): the concurrency slots it
// holds and its open reservations, read from the node's applied state at
// one index without a Raft write, like the usage reads.

// MaxInflightItems bounds the slots and the reservations one read lists
// (each); the rest is counted, not listed.
const MaxInflightItems = 1000

// InflightQuery names one key's limit: a policy, or a limit of the key's
// plan (Limit may be empty when the plan has one). Max bounds each list
// (1 to MaxInflightItems).
type InflightQuery struct {
	Key    string
	Policy string
	Limit  string
	Max    int
}

// InflightSlot is one concurrency slot the key holds: Expires is its
// hold's end (Unix ns, leader time).
type InflightSlot struct {
	Slot     string
	Acquired int64
	Expires  int64
}

// InflightReservation is one open (not yet settled) reservation:
// Reservation is the state machine's id, which the service answers as the
// token a settle takes (the one the reserve answered); Cost is
// its estimate, spent at the reserve; Expires is its hold's end, after
// which it stays settled at the estimate.
type InflightReservation struct {
	Reservation string
	Cost        int64
	Expires     int64
}

// Inflight answers an InflightQuery at the read's applied index and its
// leader time Now. Slots are in acquisition order, SlotsHeld counts them
// all, listed or not; Reservations are in id order, and MoreReservations
// says more are open than listed (the scan stops there: its work is
// bounded by Max, not by the key's reservations).
type Inflight struct {
	Key              string
	Policy           string
	Plan, Limit      string // a plan limit's read: the key's plan and the limit
	Concurrency      bool   // the limit is a concurrency limit (it can hold slots)
	Slots            []InflightSlot
	SlotsHeld        int
	Reservations     []InflightReservation
	MoreReservations bool
	Now              int64
	AppliedIndex     uint64
}
