package algo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Sliding log: the admitted requests of the last window, one entry per
// distinct timestamp with the cost admitted at it. At time t the window is
// (t − window, t]: an entry exactly window old has aged out.
//
// State, version 1:
//
//	[tag] uvarint(total cost) uvarint(oldest time) uvarint(newest − oldest)
//	uvarint(length of the entries) [length of the last entry's encoding] entries...
//
// Entries run oldest first, each uvarint(delta<<1 | (count ≠ 1)) followed by
// uvarint(count) only when count ≠ 1, delta being the time since the previous
// entry (0 for the first). Requests 1 ms apart cost 3 bytes each.
//
// Per-decision work does not grow with the log: the header holds the total,
// entries are decoded only as they age out (each once), a new entry is
// encoded after the last one (found through its length in the header), and
// the entries in between are copied as bytes. The entries' length in the
// header makes any truncation detectable without decoding them.
//
// Decide copies those middle bytes (a memcpy of the log: ~0.3 ms at 10^6
// entries). DecideInPlace does not: it leaves them where they are, writes the
// new header just before them (where the aged-out entries were) and the new
// newest entries after them, and returns a sub-slice of the caller's buffer.
// Its cost per decision is the entries that age out plus amortised O(1):
// the buffer is re-encoded only when the header has no room in front of the
// middle entries (it keeps inPlaceHeadroom bytes spare for that) or when
// append outgrows its capacity.

// logEntry is one distinct timestamp of the log.
type logEntry struct {
	t     int64 // absolute time
	delta int64 // t − the previous entry's time, as encoded
	count int64
}

func appendLogEntry(dst []byte, delta, count int64) []byte {
	if count == 1 {
		return binary.AppendUvarint(dst, uint64(delta)<<1)
	}
	dst = binary.AppendUvarint(dst, uint64(delta)<<1|1)
	return binary.AppendUvarint(dst, uint64(count))
}

func logEntryLen(delta, count int64) int {
	n := uvarintLen(uint64(delta) << 1)
	if count != 1 {
		n += uvarintLen(uint64(count))
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

var errLogCorrupt = errors.New("algo: corrupt sliding_log state")

// decodeLogEntry decodes one entry and returns the bytes read.
func decodeLogEntry(b []byte) (delta, count int64, n int, err error) {
	r := reader{b: b}
	v := r.uvarint()
	delta, count = int64(v>>1), 1
	if v&1 != 0 {
		count = r.count()
	}
	switch {
	case r.err != nil:
		return 0, 0, 0, fmt.Errorf("%w: entry: %v", errLogCorrupt, r.err)
	case delta > MaxTime || count < 1:
		return 0, 0, 0, fmt.Errorf("%w: entry delta %d count %d", errLogCorrupt, delta, count)
	}
	return delta, count, r.off, nil
}

// logView is a sliding_log state decoded only at its edges: the oldest entry,
// the still-encoded middle entries (a sub-slice of the stored state, never
// written), and up to two decoded entries at the newest end.
type logView struct {
	total int64
	empty bool
	front logEntry
	mid   []byte
	// midEnd is the offset in the decoded state where mid ends; it does not
	// move as entries are popped from mid's front.
	midEnd int
	tail   [2]logEntry
	ntail  int
}

func decodeLog(state []byte) (logView, error) {
	r := reader{b: state, off: 1}
	total, base, span := r.count(), r.time(), r.time()
	bodyLen := r.uvarint()
	lastLen := int(r.byte())
	if r.err == nil && bodyLen != uint64(len(state)-r.off) {
		r.fail(fmt.Errorf("entries take %d bytes, header says %d", len(state)-r.off, bodyLen))
	}
	if r.err != nil {
		return logView{}, fmt.Errorf("%w: header: %v", errLogCorrupt, r.err)
	}
	body := state[r.off:]
	if total < 1 || span > MaxTime-base || lastLen < 1 || lastLen > len(body) {
		return logView{}, fmt.Errorf("%w: header", errLogCorrupt)
	}
	v := logView{total: total}
	delta, count, n, err := decodeLogEntry(body)
	if err != nil {
		return logView{}, err
	}
	if delta != 0 {
		return logView{}, fmt.Errorf("%w: first entry has delta %d", errLogCorrupt, delta)
	}
	v.front = logEntry{t: base, count: count}
	if lastLen == len(body) { // a single entry
		if n != len(body) || span != 0 {
			return logView{}, fmt.Errorf("%w: single entry", errLogCorrupt)
		}
		return v, nil
	}
	midEnd := len(body) - lastLen
	delta, count, m, err := decodeLogEntry(body[midEnd:])
	if err != nil {
		return logView{}, err
	}
	if m != lastLen || n > midEnd || delta < 1 || delta > span {
		return logView{}, fmt.Errorf("%w: last entry", errLogCorrupt)
	}
	v.mid = body[n:midEnd]
	v.midEnd = len(state) - lastLen
	v.tail[0] = logEntry{t: base + span, delta: delta, count: count}
	v.ntail = 1
	return v, nil
}

func (v *logView) newest() int64 {
	if v.ntail > 0 {
		return v.tail[v.ntail-1].t
	}
	return v.front.t
}

// popFront drops the oldest entry, decoding the next one.
func (v *logView) popFront() error {
	if v.front.count > v.total {
		return fmt.Errorf("%w: entries exceed the total", errLogCorrupt)
	}
	v.total -= v.front.count
	prev := v.front.t
	switch {
	case len(v.mid) > 0:
		delta, count, n, err := decodeLogEntry(v.mid)
		if err != nil {
			return err
		}
		v.mid = v.mid[n:]
		v.front = logEntry{t: prev + delta, count: count}
		if delta < 1 || v.ntail == 0 || v.front.t >= v.tail[0].t {
			return fmt.Errorf("%w: entry out of order", errLogCorrupt)
		}
	case v.ntail > 0:
		v.front = v.tail[0]
		v.tail[0] = v.tail[1]
		v.ntail--
		if v.front.t != prev+v.front.delta {
			return fmt.Errorf("%w: entries do not add up to the newest time", errLogCorrupt)
		}
	default:
		if v.total != 0 {
			return fmt.Errorf("%w: total exceeds the entries", errLogCorrupt)
		}
		*v = logView{empty: true}
	}
	return nil
}

// add logs cost at time t ≥ newest.
func (v *logView) add(t, cost int64) {
	v.total += cost
	switch {
	case v.empty:
		*v = logView{total: cost, front: logEntry{t: t, count: cost}}
	case t == v.newest() && v.ntail > 0:
		v.tail[v.ntail-1].count += cost
	case t == v.newest():
		v.front.count += cost
	default:
		v.tail[v.ntail] = logEntry{t: t, delta: t - v.newest(), count: cost}
		v.ntail++
	}
}

// trimTo drops the oldest cost until the total is at most limit: with
// count_refused the newest limit's worth of entries decides every future
// request exactly (a window reaching further back holds ≥ limit either way).
func (v *logView) trimTo(limit int64) error {
	for v.total > limit {
		if excess := v.total - limit; v.front.count > excess {
			v.front.count -= excess
			v.total = limit
			break
		}
		if err := v.popFront(); err != nil {
			return err
		}
	}
	return nil
}

// retryAt returns the earliest time at which the log's total within the
// window falls to at most room, walking from the oldest entry only as far as
// needed. It works on a copy: the view is unchanged.
func (v logView) retryAt(room, window int64) (int64, error) {
	need := v.total - room
	for dropped := int64(0); !v.empty; {
		if dropped += v.front.count; dropped >= need {
			return v.front.t + window, nil
		}
		if err := v.popFront(); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: total exceeds the entries", errLogCorrupt)
}

func (v *logView) appendTo(dst []byte) []byte {
	dst = v.appendPrefix(dst)
	dst = append(dst, v.mid...)
	return v.appendTail(dst)
}

// appendPrefix appends everything before the middle entries: the tag, the
// header and the oldest entry.
func (v *logView) appendPrefix(dst []byte) []byte {
	last := logEntryLen(0, v.front.count)
	body := last + len(v.mid)
	for _, e := range v.tail[:v.ntail] {
		last = logEntryLen(e.delta, e.count)
		body += last
	}
	dst = append(dst, stateTag(SlidingLog))
	dst = binary.AppendUvarint(dst, uint64(v.total))
	dst = binary.AppendUvarint(dst, uint64(v.front.t))
	dst = binary.AppendUvarint(dst, uint64(v.newest()-v.front.t))
	dst = binary.AppendUvarint(dst, uint64(body))
	dst = append(dst, byte(last))
	return appendLogEntry(dst, 0, v.front.count)
}

// appendTail appends the newest (decoded) entries.
func (v *logView) appendTail(dst []byte) []byte {
	for _, e := range v.tail[:v.ntail] {
		dst = appendLogEntry(dst, e.delta, e.count)
	}
	return dst
}

const (
	// inPlaceMin: logs with fewer middle bytes are re-encoded (a copy that
	// small costs less than the bookkeeping it would save).
	inPlaceMin = 256
	// inPlaceHeadroom is the spare room left in front of a re-encoded log, so
	// that a header that grows by a few bytes still fits in place.
	inPlaceHeadroom = 32
)

// writeInPlace encodes the view into the buffer it was decoded from (state),
// leaving the middle entries where they are; see DecideInPlace.
func (v *logView) writeInPlace(state []byte) []byte {
	if len(v.mid) < inPlaceMin {
		var scratch [inPlaceMin + 128]byte
		return append(state[:0], v.appendTo(scratch[:0])...)
	}
	var scratch [64]byte
	prefix := v.appendPrefix(scratch[:0])
	midOff := v.midEnd - len(v.mid)
	if len(prefix) > midOff {
		size := len(prefix) + len(v.mid) + 2*binary.MaxVarintLen64*v.ntail
		out := make([]byte, inPlaceHeadroom, inPlaceHeadroom+size+size/4)
		return v.appendTo(out)[inPlaceHeadroom:]
	}
	start := midOff - len(prefix)
	copy(state[start:], prefix)
	return v.appendTail(state[:v.midEnd])[start:]
}

// decideSlidingLog decides into dst, or, when inPlace, into state itself
// (see DecideInPlace).
func decideSlidingLog(dst []byte, s *Spec, state []byte, now, cost int64, inPlace bool) (Decision, []byte, error) {
	v := logView{empty: true}
	te := now
	if len(state) > 0 {
		var err error
		if v, err = decodeLog(state); err != nil {
			return Decision{}, nil, err
		}
		te = max(te, v.newest())
	}
	cutoff := te - int64(s.Window)
	if !v.empty && v.newest() <= cutoff {
		v = logView{empty: true} // all aged out: nothing to decode
	}
	for !v.empty && v.front.t <= cutoff {
		if err := v.popFront(); err != nil {
			return Decision{}, nil, err
		}
	}

	d := Decision{Limit: s.Limit}
	c := effectiveCost(cost)
	switch {
	case c > s.Limit:
		d.RetryAfter = Never
	case v.total+c <= s.Limit:
		d.Allowed = true
		if cost > 0 {
			v.add(te, cost)
		}
	default:
		if s.CountRefused && cost > 0 {
			// The penalty variant logs the refused request too, so its retry
			// time counts it.
			v.add(te, cost)
			if err := v.trimTo(s.Limit); err != nil {
				return Decision{}, nil, err
			}
		}
		retry, err := v.retryAt(s.Limit-c, int64(s.Window))
		if err != nil {
			return Decision{}, nil, err
		}
		d.RetryAfter = time.Duration(retry - now)
	}
	d.Remaining = max(s.Limit-v.total, 0)
	if v.empty {
		return d, nil, nil
	}
	d.ResetAfter = time.Duration(v.newest() + int64(s.Window) - now)
	if inPlace && len(state) > 0 {
		return d, v.writeInPlace(state), nil
	}
	return d, v.appendTo(dst), nil
}
