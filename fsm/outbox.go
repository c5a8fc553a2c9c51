package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// The outbox: events (threshold crossings, notify.go; bans, ban.go; key
// budget exhaustion, budget.go) wait
// here, in the replicated state, until the leader's delivery loop (package
// webhook) has given each to every webhook and acks it (CmdAckEvents). An
// event is a record in the state bucket under 'O' ‖ be64(seq), seq being
// the Raft index of the entry that produced it ‖ 16 bits of order within
// the entry, so every replica holds the same events in the same order and
// a new leader redelivers whatever was not acked (at least once, same id).
//
// Bounds: at most nodeapi.MaxOutbox events (the count is persist's key
// group of the 'O' records, exact like Meta.Keys): an event past it is
// dropped and counted, never stored; an event expires
// nodeapi.MaxEventAgeNs after it was decided (the sweep drops it, counted).
// The marks that fired it stay either way: a threshold fires once.
//
// The in-memory copy (outboxTable) is published after commit, for the
// delivery loop and the event stream (Subscribe), which sees each event
// once, when the entry that produced it is applied on this replica.

// CmdAckEvents removes delivered events (see the list in types.go; never renumber).
const CmdAckEvents byte = 52 // []seq → nil (seqs already gone are ignored)

const (
	outboxKeyPrefix = 'O'
	outboxGroup     = "\x00outbox" // persist key group of the 'O' records: no policy name starts with 0
)

// EncodeAckEvents builds a CmdAckEvents entry.
func EncodeAckEvents(seqs []uint64) []byte {
	dst := binary.AppendUvarint([]byte{CmdAckEvents, cmdVersion}, uint64(len(seqs)))
	for _, s := range seqs {
		dst = binary.AppendUvarint(dst, s)
	}
	return dst
}

func init() {
	registerCommand(CmdAckEvents, commandType{
		name: "ack events",
		decode: func(c *command, d *decoder) {
			n := d.count(1)
			c.alert.seqs = c.alert.seqs[:0]
			for i := 0; i < n && d.err == nil; i++ {
				c.alert.seqs = append(c.alert.seqs, d.uvarint())
			}
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			for _, s := range c.alert.seqs[:min(len(c.alert.seqs), nodeapi.MaxAck)] {
				k := outboxKey(s)
				st, err := tx.State(k)
				if err != nil {
					return nil, err
				}
				if !st.Found {
					continue // acked before, or swept: acks commute
				}
				if err := tx.DeleteState(k, st); err != nil {
					return nil, err
				}
				a.f.outbox.stage(s, nil)
				a.f.outbox.delivered.Add(1)
			}
			return nil, nil
		},
	})
}

func outboxKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{outboxKeyPrefix}, seq)
}

// keyGroup is persist's KeyGroup: the policy of a policy key (budget.go),
// the outbox's group for its records, inlineGroup for inline limits' states.
func keyGroup(key []byte) []byte {
	if len(key) > 0 && key[0] == outboxKeyPrefix {
		return []byte(outboxGroup)
	}
	if g := inlineKeyGroup(key); g != nil {
		return g
	}
	if g := planRecordGroup(key); g != nil {
		return g
	}
	return policyOfKey(key)
}

// An outbox record: uvarint(len(id)) ‖ id ‖ varint(at) ‖ body.
func decodeOutbox(b []byte) (nodeapi.Event, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n == 0 || uint64(len(b)-w) < n {
		return nodeapi.Event{}, errors.New("malformed outbox record")
	}
	id := string(b[w : w+int(n)])
	at, m := binary.Varint(b[w+int(n):])
	if m <= 0 {
		return nodeapi.Event{}, errors.New("malformed outbox record")
	}
	return nodeapi.Event{ID: id, At: at, Body: bytes.Clone(b[w+int(n)+m:])}, nil
}

// emit puts an event in the outbox, or drops it (counted) when the outbox
// is full or the entry has produced as many as its seqs can number.
func (a *applier) emit(tx *persist.Tx, id string, body []byte, now int64) error {
	seq := a.nextSeq()
	if tx.GroupKeys([]byte(outboxGroup)) >= nodeapi.MaxOutbox || a.emitted >= 1<<16 {
		a.f.outbox.dropped.Add(1)
		return nil
	}
	a.emitted++
	b := binary.AppendUvarint(tx.Alloc(len(id) + len(body) + 2*binary.MaxVarintLen64)[:0], uint64(len(id)))
	b = append(b, id...)
	b = binary.AppendVarint(b, now)
	b = append(b, body...)
	k := outboxKey(seq)
	st, err := tx.State(k)
	if err != nil {
		return err
	}
	if err := tx.PutState(k, st, b, now+nodeapi.MaxEventAgeNs); err != nil {
		return err
	}
	a.f.outbox.stage(seq, &nodeapi.Event{Seq: seq, ID: id, At: now, Body: bytes.Clone(body)})
	return nil
}

// nextSeq is the seq the entry's next event takes (an id may name it:
// budget.go).
func (a *applier) nextSeq() uint64 {
	if a.emittedAt != a.index {
		a.emitted, a.emittedAt = 0, a.index
	}
	return a.index<<16 | a.emitted
}

// outboxSwept counts an event the sweep removes, undelivered, as dropped.
func (a *applier) outboxSwept(key []byte) {
	if len(key) == 9 {
		a.f.outbox.stage(binary.BigEndian.Uint64(key[1:]), nil)
		a.f.outbox.dropped.Add(1)
	}
}

// outboxTable is the in-memory copy of the outbox, by seq.
type outboxTable struct {
	mu      sync.RWMutex
	m       map[uint64]nodeapi.Event
	pending []outboxChange // apply goroutine only
	subs    map[chan<- OutboxEvent]struct{}

	delivered, dropped atomic.Uint64
}

type outboxChange struct {
	seq uint64
	e   *nodeapi.Event // nil: removed
}

// OutboxEvent is an event and its place in the outbox (nodeapi's).
type OutboxEvent = nodeapi.Event

func (t *outboxTable) stage(seq uint64, e *nodeapi.Event) {
	t.pending = append(t.pending, outboxChange{seq, e})
}

func (t *outboxTable) discard() { t.pending = t.pending[:0] }

// publish applies the committed changes and hands each new event to every
// subscriber that has room for it (a slow subscriber misses events; it can
// resume from the outbox).
func (t *outboxTable) publish() {
	if len(t.pending) == 0 {
		return
	}
	t.mu.Lock()
	if t.m == nil {
		t.m = map[uint64]nodeapi.Event{}
	}
	for _, c := range t.pending {
		if c.e == nil {
			delete(t.m, c.seq)
			continue
		}
		t.m[c.seq] = *c.e
		for ch := range t.subs {
			select {
			case ch <- *c.e:
			default:
			}
		}
	}
	t.mu.Unlock()
	t.pending = t.pending[:0]
}

// load reads the outbox records (FSM.load); a damaged one is refused.
func (t *outboxTable) load(tx *persist.Tx) error {
	m := map[uint64]nodeapi.Event{}
	err := tx.ForEachState([]byte{outboxKeyPrefix}, func(k, v []byte) error {
		e, err := decodeOutbox(v)
		if len(k) != 9 || err != nil {
			return fmt.Errorf("outbox record %q: %w", k, persist.ErrCorrupt)
		}
		e.Seq = binary.BigEndian.Uint64(k[1:])
		m[e.Seq] = e
		return nil
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.m = m
	t.mu.Unlock()
	return nil
}

// Outbox returns up to limit events of this replica's outbox after seq
// (0: from the start), in order.
func (f *FSM) Outbox(after uint64, limit int) []OutboxEvent {
	f.outbox.mu.RLock()
	out := make([]OutboxEvent, 0, min(limit, len(f.outbox.m)))
	for s, e := range f.outbox.m {
		if s > after {
			out = append(out, e)
		}
	}
	f.outbox.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// OutboxStats are the events waiting, and this replica's count of events
// acked and dropped (outbox full, or too old) since it started.
func (f *FSM) OutboxStats() (waiting int, delivered, dropped uint64) {
	f.outbox.mu.RLock()
	waiting = len(f.outbox.m)
	f.outbox.mu.RUnlock()
	return waiting, f.outbox.delivered.Load(), f.outbox.dropped.Load()
}

// Subscribe hands every event applied on this replica from now on to ch,
// unless ch is full; the returned func stops it.
func (f *FSM) Subscribe(ch chan<- OutboxEvent) (cancel func()) {
	t := &f.outbox
	t.mu.Lock()
	if t.subs == nil {
		t.subs = map[chan<- OutboxEvent]struct{}{}
	}
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.subs, ch)
		t.mu.Unlock()
	}
}
