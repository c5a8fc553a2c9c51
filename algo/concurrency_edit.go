package algo

import (
	"encoding/binary"
	"time"
)

// Acquire, Release and Renew edit a concurrency state in one pass over its
// encoded bytes instead of decoding it into slices and encoding it again:
// a key's state lists up to maxTombstones freed slots beside the held ones,
// and the decode (a slice of slots, grown, each with an id pointer the
// collector scans) cost more than the decision. The bytes written are the
// ones the decode, prune and re-encode wrote (state version 1, unchanged):
// concurrency_ref_test.go keeps that implementation as the oracle and the
// property and fuzz tests hold the two equal on every input, malformed ones
// included.
//
// The pruned tombstones are a sliding window: prune appends a tombstone for
// each held slot whose hold ended (in acquisition order) to the freed list,
// dropping the oldest once maxTombstones are kept, then forgets those past
// their time. So with G = freed ++ ended, the survivors are the last
// maxTombstones of G whose time is after te.

// slotScan is a validated concurrency state and what its scan counted.
type slotScan struct {
	b                 []byte
	te                int64 // now, or the latest acquisition (time never runs backwards)
	held, freed       int64 // records in each section
	heldOff, freedOff int   // where each section's records begin
	maxHold           int64

	// Set by the scan's count.
	live   int64 // held records whose hold ends after te
	liveAt int64 // index among held records of the first live one with the id, -1
	tombs  int64 // tombstones that survive the prune
	tombAt int64 // index in G of the first surviving tombstone with the id, -1
	skip   int64 // G's leading records the window drops

	// The freed section's survivors, when they are one run of canonical
	// records (the common case: tombstones end oldest first), are copied
	// as bytes by emit instead of read again: [runStart, runEnd), the first
	// one ending at firstEnd with firstUntil, the others' latest restMax.
	copyable                   bool
	runStart, runEnd, firstEnd int
	firstUntil, restMax        int64
}

// scanSlots validates state exactly as decodeSlots does (same errors),
// finds its sections and te, counts what survives the prune and finds id
// (when search) among the live held slots and the surviving tombstones. The
// tombstones, most of a busy key's bytes, are read once here and once by
// emit.
func scanSlots(s *Spec, state []byte, now int64, id []byte, search bool) (slotScan, error) {
	if err := checkConcurrency(s, now); err != nil {
		return slotScan{}, err
	}
	if len(state) > 0 && state[0] != stateTag(Concurrency) {
		state = nil
	}
	sc := slotScan{b: state, te: now, maxHold: int64(s.MaxHold), liveAt: -1, tombAt: -1}
	if len(state) == 0 {
		return sc, nil
	}
	r := reader{b: state, off: 1}
	sc.held = r.upTo(MaxConcurrencyLimit, "slots")
	sc.heldOff = r.off
	for i := int64(0); i < sc.held && r.err == nil; i++ {
		sc.te = max(sc.te, r.time())
		r.time()
		r.bytes(int(r.upTo(MaxSlotID, "slot id length")))
	}
	if r.err != nil {
		return slotScan{}, r.done("concurrency")
	}
	var ended int64
	h := reader{b: state, off: sc.heldOff}
	for i := int64(0); i < sc.held; i++ {
		_, end, hid := h.heldRec()
		if end <= sc.te {
			ended++
			continue
		}
		if search && sc.liveAt < 0 && string(hid) == string(id) {
			sc.liveAt = i
		}
		sc.live++
	}
	sc.freed = r.upTo(maxTombstones, "freed slots")
	sc.freedOff = r.off
	sc.skip = max(0, sc.freed+ended-maxTombstones)
	sc.copyable = true
	gap := false // a dropped record after the survivors began
	for i := int64(0); i < sc.freed && r.err == nil; i++ {
		start := r.off
		until := r.time()
		mid := r.off
		n := r.upTo(MaxSlotID, "slot id length")
		canonical := mid-start == uvarintLen(uint64(until)) && r.off-mid == uvarintLen(uint64(n))
		tid := r.bytes(int(n))
		if i < sc.skip || until <= sc.te {
			gap = gap || sc.firstEnd > 0
			continue
		}
		if gap || !canonical {
			sc.copyable = false
		}
		if sc.firstEnd == 0 {
			sc.runStart, sc.firstEnd, sc.firstUntil = start, r.off, until
		} else {
			sc.restMax = max(sc.restMax, until)
		}
		sc.runEnd = r.off
		if search && sc.tombAt < 0 && string(tid) == string(id) {
			sc.tombAt = i
		}
		sc.tombs++
	}
	if err := r.done("concurrency"); err != nil {
		return slotScan{}, err
	}
	// G's tail: the held slots whose hold ended, as prune's tombstones.
	h = reader{b: state, off: sc.heldOff}
	for i, g := int64(0), sc.freed; i < sc.held; i++ {
		_, end, hid := h.heldRec()
		if end > sc.te {
			continue
		}
		if g >= sc.skip && end+sc.maxHold > sc.te {
			if search && sc.tombAt < 0 && string(hid) == string(id) {
				sc.tombAt = g
			}
			sc.tombs++
		}
		g++
	}
	return sc, nil
}

// heldRec reads one held record of a state scanSlots validated, so
// without the checks (the passes after the scan are most of the work).
func (r *reader) heldRec() (acquired, end int64, id []byte) {
	acquired, end = r.v(), r.v()
	return acquired, end, r.raw(int(r.v()))
}

// v reads a validated varint.
func (r *reader) v() int64 {
	v, n := binary.Uvarint(r.b[r.off:])
	r.off += n
	return int64(v)
}

// raw reads n validated bytes.
func (r *reader) raw(n int) []byte {
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// tombIter walks G: the freed records, then the held ones whose hold ended
// by te as the tombstones prune makes of them.
type tombIter struct {
	fr, hr   reader
	nf, nh   int64
	te, hold int64
}

func (sc *slotScan) tombs0() tombIter {
	return tombIter{fr: reader{b: sc.b, off: sc.freedOff}, hr: reader{b: sc.b, off: sc.heldOff},
		nf: sc.freed, nh: sc.held, te: sc.te, hold: sc.maxHold}
}

func (it *tombIter) next() (until int64, id []byte, ok bool) {
	if it.nf > 0 {
		it.nf--
		until = it.fr.v()
		return until, it.fr.raw(int(it.fr.v())), true
	}
	for it.nh > 0 {
		it.nh--
		_, end, id := it.hr.heldRec()
		if end <= it.te {
			return end + it.hold, id, true
		}
	}
	return 0, nil, false
}

// slotEdit is what emit changes beside the prune.
type slotEdit struct {
	dropHeld  int64 // held record to free (a release), -1
	renewHeld int64 // held record whose end moves to renewEnd, -1
	renewEnd  int64
	watch     int64  // held record whose final end emit reports, -1
	add       []byte // id of a slot acquired at te, ending at addEnd (nil: none)
	addEnd    int64
	dropTomb  int64  // tombstone (index in G) forgotten: its id is held again, -1
	tomb      []byte // id of a tombstone added until tombUntil (nil: none)
	tombUntil int64
}

func noEdit() slotEdit { return slotEdit{dropHeld: -1, renewHeld: -1, watch: -1, dropTomb: -1} }

// emit appends the pruned, edited state to dst (nil when nothing is left,
// as a fresh key) and returns its decision at now (RetryAfter unset), the
// watched record's end and the time until the earliest held slot ends (0
// with none).
func (sc *slotScan) emit(dst []byte, s *Spec, now int64, e slotEdit) ([]byte, Decision, int64, time.Duration) {
	heldN := sc.live
	if e.dropHeld >= 0 {
		heldN--
	}
	if e.add != nil {
		heldN++
	}
	tombN, capDrop := sc.tombs, false
	if e.dropTomb >= 0 {
		tombN--
	}
	if e.tomb != nil {
		if tombN >= maxTombstones { // the oldest survivor makes room
			capDrop = true
			tombN--
		}
		tombN++
	}
	d := Decision{Limit: s.Limit, Remaining: max(s.Limit-heldN, 0)}
	last, first, watched := now, int64(-1), int64(0)
	end1 := func(end int64) {
		last = max(last, end)
		if first < 0 || end < first {
			first = end
		}
	}
	var next []byte
	if heldN > 0 || tombN > 0 {
		next = append(dst, stateTag(Concurrency))
		next = appendUvarint(next, heldN)
	}
	r := reader{b: sc.b, off: sc.heldOff}
	for i := int64(0); i < sc.held; i++ {
		acquired, end, id := r.heldRec()
		if end <= sc.te || i == e.dropHeld {
			continue
		}
		if i == e.renewHeld {
			end = e.renewEnd
		}
		if i == e.watch {
			watched = end
		}
		end1(end)
		next = appendUvarint(next, acquired)
		next = appendUvarint(next, end)
		next = appendUvarint(next, int64(len(id)))
		next = append(next, id...)
	}
	if e.add != nil {
		end1(e.addEnd)
		next = appendUvarint(next, sc.te)
		next = appendUvarint(next, e.addEnd)
		next = appendUvarint(next, int64(len(e.add)))
		next = append(next, e.add...)
	}
	if next != nil {
		next = appendUvarint(next, tombN)
	}
	it, g0 := sc.tombs0(), int64(0)
	if sc.copyable && (e.dropTomb < 0 || e.dropTomb >= sc.freed) {
		if sc.firstEnd > 0 {
			start := sc.runStart
			if capDrop { // the first survivor makes room
				start, capDrop = sc.firstEnd, false
			} else {
				last = max(last, sc.firstUntil)
			}
			last = max(last, sc.restMax)
			next = append(next, sc.b[start:sc.runEnd]...)
		}
		it.nf, g0 = 0, sc.freed
	}
	for g := g0; ; g++ {
		until, id, ok := it.next()
		if !ok {
			break
		}
		if g < sc.skip || until <= sc.te || g == e.dropTomb {
			continue
		}
		if capDrop {
			capDrop = false
			continue
		}
		last = max(last, until)
		next = appendUvarint(next, until)
		next = appendUvarint(next, int64(len(id)))
		next = append(next, id...)
	}
	if e.tomb != nil {
		last = max(last, e.tombUntil)
		next = appendUvarint(next, e.tombUntil)
		next = appendUvarint(next, int64(len(e.tomb)))
		next = append(next, e.tomb...)
	}
	d.ResetAfter = time.Duration(last - now)
	var earliest time.Duration
	if first >= 0 {
		earliest = time.Duration(first - now)
	}
	return next, d, watched, earliest
}

// heldAt returns held record i's acquisition and end.
func (sc *slotScan) heldAt(i int64) (acquired, end int64) {
	r := reader{b: sc.b, off: sc.heldOff}
	for ; i > 0; i-- {
		r.heldRec()
	}
	acquired, end, _ = r.heldRec()
	return acquired, end
}
