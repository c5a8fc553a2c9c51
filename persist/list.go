package persist

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// errWriterScan: ScanStates in the writer's transaction, whose state cache
// holds writes no cursor sees.
var errWriterScan = errors.New("persist: ScanStates needs a read-only transaction (View)")

// ScanStates calls fn for each stored state whose storage key starts with
// prefix, in key order, starting strictly after after (nil: from the first
// such key), until fn returns false or an error.
//
// It serves listings (the usage inventory) and runs only in a read-only
// transaction (View): that transaction is one bbolt snapshot of the last
// finished commit, whose meta record (Tx.Meta) is the applied index the
// states correspond to, so a listing is of one applied index however many
// commits happen while it scans. Strictly after is what makes paging by the
// last key returned neither skip nor repeat a key that exists throughout:
// the next page seeks to that key, wherever later writes moved the rest.
//
// Each value's checksum is verified as Tx.State does; fn's key and State.Data
// are valid until the transaction ends.
func (t *Tx) ScanStates(prefix, after []byte, fn func(key []byte, st State) (bool, error)) error {
	if t.cache != nil {
		return errWriterScan
	}
	if after != nil && !bytes.HasPrefix(after, prefix) {
		// after sorts outside the prefix: before it (nothing skipped) or
		// past every key of it (nothing left).
		if bytes.Compare(after, prefix) > 0 {
			return nil
		}
		after = nil
	}
	c := t.state.file.Cursor()
	var k, v []byte
	if after != nil {
		k, v = c.Seek(after)
		if k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	} else {
		k, v = c.Seek(prefix)
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		st, err := t.decodeState(k, v)
		if err != nil {
			return err
		}
		more, err := fn(k, st)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// StateReader reads states by key in a read-only transaction through one
// cursor, kept for the reader: Tx.State opens a bbolt cursor per call,
// whose search stack is allocated each time, and a listing that looks up
// records beside each key it scans (a plan key's assignment and override)
// would allocate per key scanned instead of per page.
type StateReader struct {
	t *Tx
	c *bolt.Cursor
}

// StateReader returns a reader on t, valid until t ends (read-only
// transactions only, like ScanStates).
func (t *Tx) StateReader() (*StateReader, error) {
	if t.cache != nil {
		return nil, errWriterScan
	}
	return &StateReader{t: t, c: t.state.file.Cursor()}, nil
}

// State is Tx.State: the state under key, checksum verified.
func (r *StateReader) State(key []byte) (State, error) {
	k, v := r.c.Seek(key)
	if k == nil || !bytes.Equal(k, key) {
		return State{}, nil
	}
	return r.t.decodeState(key, v)
}
