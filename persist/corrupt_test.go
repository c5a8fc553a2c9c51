package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// fillStore writes states, request ids, a policy and a node in two
// transactions (the second rewrites half the states, so the file has free
// pages and a non-empty freelist), closes it cleanly and returns its digest.
func fillStore(t *testing.T, path string) string {
	t.Helper()
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; i < 300; i++ {
		keys = append(keys, fmt.Sprintf("key-%04d", i))
	}
	putStates(t, s, 1, 1000, keys...)
	putStates(t, s, 2, 2000, keys[:150]...)
	update(t, s, func(tx *Tx) error {
		for i := 0; i < 20; i++ {
			id := []byte(fmt.Sprintf("request-%02d", i))
			if err := tx.PutRequest(id, Request{}, []byte(fmt.Sprintf("result-%02d", i)), 5000); err != nil {
				return err
			}
		}
		if err := tx.PutPolicy("policy-one", []byte("encoded-policy-one")); err != nil {
			return err
		}
		tx.SetApplied(3)
		return tx.PutNode("node-one", "127.0.0.1:9999")
	})
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return d
}

// occurrences are the offsets of pat in b.
func occurrences(b, pat []byte) []int {
	var at []int
	for i := 0; ; {
		j := bytes.Index(b[i:], pat)
		if j < 0 {
			return at
		}
		at = append(at, i+j)
		i += j + 1
	}
}

// freelistIDs is the offset of the first page id in the freelist page the
// newer bbolt meta page points to.
func freelistIDs(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	// Meta page: 16-byte page header, then magic, version, page size,
	// flags (4 each), root bucket (16), freelist pgid, pgid, txid (8 each).
	best, free := uint64(0), uint64(0)
	for i := 0; i < 2; i++ {
		m := b[i*page+16:]
		txid := binary.LittleEndian.Uint64(m[48:])
		if txid >= best {
			best, free = txid, binary.LittleEndian.Uint64(m[32:])
		}
	}
	off := int(free) * page
	if count := binary.LittleEndian.Uint16(b[off+10:]); count == 0 {
		t.Fatal("test store has an empty freelist")
	}
	return off + 16
}

// TestDamageIsCaughtAtOpen flips one byte in each kind of record of a
// cleanly stopped store: Open must either refuse (naming the file) or set the
// file aside and start empty to rebuild from Raft; it may open the file as
// is only if what it reads back is exactly what was written (the byte was in
// a page no longer in use).
func TestDamageIsCaughtAtOpen(t *testing.T) {
	dir := t.TempDir()
	goodPath := filepath.Join(dir, "good.db")
	want := fillStore(t, goodPath)
	good, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		name string
		at   []int
	}
	var targets []target
	add := func(name string, pat []byte, delta int) {
		var at []int
		for _, o := range occurrences(good, pat) {
			at = append(at, o+delta)
		}
		if len(at) == 0 {
			t.Fatalf("%s: pattern %q not in the file", name, pat)
		}
		targets = append(targets, target{name, at})
	}
	add("state value", []byte("state:key-0200"), 2)
	add("state key", []byte("key-0042"), 5) // state bucket and expiry index
	add("request value", []byte("result-07"), 3)
	add("request id", []byte("request-07"), 8)
	add("policy", []byte("encoded-policy-one"), 4)
	add("node", []byte("127.0.0.1:9999"), 4)
	m := Meta{AppliedIndex: 3, LastTime: 2000, Keys: 300, RequestIDs: 20}
	add("meta record", encodeMeta(m), 9)
	add("schema record", encodeSchema(), 2)
	targets = append(targets, target{"freelist", []int{freelistIDs(t, good)}})

	for _, tg := range targets {
		caught := 0
		for _, off := range tg.at {
			t.Run(fmt.Sprintf("%s@%d", tg.name, off), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "fsm.db")
				bad := bytes.Clone(good)
				bad[off] ^= 0x5a
				if err := os.WriteFile(path, bad, 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := Open(path, Options{NoSync: true})
				switch {
				case err != nil:
					if !strings.Contains(err.Error(), path) {
						t.Fatalf("refusal does not name the file: %v", err)
					}
					caught++
				case s.Recovered():
					defer s.Close()
					if m := s.Meta(); m != (Meta{}) || readState(t, s, "key-0200").Found {
						t.Fatalf("rebuilding store is not empty: %+v", m)
					}
					if !exists(path + ".corrupt") {
						t.Fatal("damaged file not kept as .corrupt")
					}
					caught++
				default:
					defer s.Close()
					if got, err := s.Digest(); err != nil || got != want {
						t.Fatalf("opened a damaged file and serves it: digest %v", err)
					}
				}
			})
		}
		if caught == 0 {
			t.Errorf("%s: no flipped byte was caught (%d tried)", tg.name, len(tg.at))
		}
	}
}

// TestChecksumMismatchAtRunTime: damage that appears while the store is open
// (in the page cache, after the scrub) fails the read with ErrCorrupt naming
// the file: the value is never returned.
func TestChecksumMismatchAtRunTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	putStates(t, s, 1, 1000, "key-a", "key-b")
	// Reopen so the state cache does not hold key-a: damage to a value the
	// cache holds is overwritten at the next flush and never read.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range occurrences(b, []byte("state:key-a")) {
		if _, err := f.WriteAt([]byte{b[o+1] ^ 1}, int64(o+1)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	err = s.Update(func(tx *Tx) error {
		st, err := tx.State([]byte("key-a"))
		if err == nil {
			t.Errorf("read a damaged value: %q", st.Data)
		}
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("damaged read: %v, want ErrCorrupt naming %s", err, path)
	}
	if st := readState(t, s, "key-b"); string(st.Data) != "state:key-b" {
		t.Fatalf("undamaged key: %q", st.Data)
	}
	if _, err := s.Digest(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("digest of damaged data: %v", err)
	}
}

// TestTruncatedFileIsSetAside: a file cut short after a clean stop (bbolt's
// check would fault reading past its end) is damage: set aside, rebuilt.
func TestTruncatedFileIsSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	fillStore(t, path)
	for _, size := range []int64{2 * int64(os.Getpagesize()), 5 * int64(os.Getpagesize())} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{NoSync: true})
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("refusal does not name the file: %v", err)
			}
			continue
		}
		if !s.Recovered() || s.Meta() != (Meta{}) {
			t.Fatalf("opened a truncated file of %d bytes as is: %+v", size, s.Meta())
		}
		s.Close()
		fillStore(t, path)
	}
}

// TestInlineElementOutsideItsPage: a damaged offset in an element of a
// bucket bbolt keeps inline (in its parent's page) that points at a valid
// copy of the record elsewhere in the file passes every checksum and bbolt's
// own check (which skips inline buckets); a reader whose copy of the bucket
// is elsewhere (a writable transaction copies it to the heap) then reads
// garbage. The scrub refuses the file: an inline bucket's records must lie
// in its inline page.
func TestInlineElementOutsideItsPage(t *testing.T) {
	// bbolt reads an inline bucket in place, from the mapped file, only
	// when its value is 8-byte aligned (else from a heap copy, where the
	// damaged offset would read garbage the checksum catches anyway): pad
	// the policies, which come before the requests bucket, until it is.
	// The same with the offset pointing at the next record in the page: two
	// equal keys, each with a valid checksum.
	for _, outside := range []bool{true, false} {
		found := false
		for pad := 0; pad < 8 && !found; pad++ {
			found = inlineElementOutsideItsPage(t, pad, outside)
		}
		if !found {
			t.Fatal("the requests bucket's inline value was never 8-byte aligned")
		}
	}
}

// inlineElementOutsideItsPage runs the test with policies padded by pad
// bytes, element 0 pointing outside the page or at element 1's record;
// false if the requests bucket's value is not aligned.
func inlineElementOutsideItsPage(t *testing.T, pad int, outside bool) bool {
	path := filepath.Join(t.TempDir(), "fsm.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error {
		if err := tx.PutPolicy("p", []byte("encoded"+strings.Repeat("x", pad))); err != nil {
			return err
		}
		for _, id := range []string{"ra", "rb"} {
			if err := tx.PutRequest([]byte(id), Request{}, []byte("result-"+id), 5000); err != nil {
				return err
			}
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyFile(path); err != nil {
		t.Fatalf("the undamaged file: %v", err)
	}

	// Find the "requests" bucket element in a leaf page (bbolt's layout:
	// 16-byte page header, 16-byte leaf elements of flags, pos, ksize,
	// vsize; pos counts from the element).
	const ps = 4096
	u32 := binary.LittleEndian.Uint32
	value := -1
	for pg := 0; pg*ps < len(b) && value < 0; pg++ {
		p := b[pg*ps : (pg+1)*ps]
		if binary.LittleEndian.Uint16(p[8:10])&0x02 == 0 { // not a leaf
			continue
		}
		for i := 0; i < int(binary.LittleEndian.Uint16(p[10:12])); i++ {
			e := 16 + 16*i
			pos, ks := int(u32(p[e+4:])), int(u32(p[e+8:]))
			if u32(p[e:])&1 != 0 && string(p[e+pos:e+pos+ks]) == "requests" {
				value = pg*ps + e + pos + ks
				break
			}
		}
	}
	if value < 0 {
		t.Fatal("no inline requests bucket found")
	}
	if value%8 != 0 {
		return false
	}
	// Element 0 of the inline page (past the 16-byte bucket header): copy
	// its record to the same place in a page appended to the file, and
	// point the element there.
	eh := value + 16 + 16
	pos, ks, vs := int(u32(b[eh+4:])), int(u32(b[eh+8:])), int(u32(b[eh+12:]))
	rec := eh + pos
	if string(b[rec:rec+ks]) != "ra" {
		t.Fatalf("element 0 is %q, want the request ra", b[rec:rec+ks])
	}
	want := "inline page"
	if outside {
		end := (len(b) + ps - 1) / ps * ps
		b = append(b, make([]byte, end-len(b)+ps)...)
		target := end + rec%ps
		copy(b[target:], b[rec:rec+ks+vs])
		binary.LittleEndian.PutUint32(b[eh+4:], uint32(pos+target-rec))
	} else {
		next := eh + 16 + int(u32(b[eh+16+4:]))
		binary.LittleEndian.PutUint32(b[eh+4:], uint32(next-eh))
		want = "out of order"
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := verifyFile(path); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify: %v, want ErrCorrupt naming %q", err, want)
	}
	s, err = Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Recovered() {
		t.Fatal("the damaged file was trusted: Recovered() is false")
	}
	return true
}

// TestChecksumCoversTheKey: a value filed under another key (a misdirected
// write, a damaged branch page pointing at the wrong leaf) fails its
// checksum, at Open and in a direct read: the checksum covers the key, not
// only the value.
func TestChecksumCoversTheKey(t *testing.T) {
	v := seal([]byte("key-a"), append([]byte("payload"), make([]byte, sumLen)...))
	if p, ok := unsealed([]byte("key-a"), v); !ok || string(p) != "payload" {
		t.Fatalf("unsealed under its own key: %q %v", p, ok)
	}
	if p, ok := unsealed([]byte("key-b"), v); ok {
		t.Fatalf("a value sealed under key-a verifies under key-b: %q", p)
	}

	path := filepath.Join(t.TempDir(), "fsm.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	putStates(t, s, 1, 1000, "key-a", "key-b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// key-a's sealed value, byte for byte, under key-b: the file is a valid
	// bbolt file and every value's own bytes are intact.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		return b.Put([]byte("key-b"), bytes.Clone(b.Get([]byte("key-a"))))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{NoSync: true})
	switch {
	case err != nil:
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("refusal: %v, want ErrCorrupt naming %s", err, path)
		}
	case s.Recovered():
		defer s.Close()
		if st := readState(t, s, "key-b"); st.Found {
			t.Fatalf("rebuilding store serves key-b: %q", st.Data)
		}
	default:
		defer s.Close()
		t.Fatalf("opened a store with key-a's value under key-b and serves it: key-b = %q", readState(t, s, "key-b").Data)
	}
}
