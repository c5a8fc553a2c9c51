package persist

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func snapshotBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	var buf bytes.Buffer
	n, err := sn.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestSnapshotRestore(t *testing.T) {
	src, _ := openTemp(t, Options{NoSync: true})
	putStates(t, src, 5, 100, "a", "b")
	update(t, src, func(tx *Tx) error { return tx.PutPolicy("api", []byte("spec")) })
	snap := snapshotBytes(t, src)
	want, _ := src.Digest()
	wantMeta := src.Meta()

	// Writes after the snapshot started are not in it.
	putStates(t, src, 6, 200, "c")

	dst, _ := openTemp(t, Options{NoSync: true})
	putStates(t, dst, 50, 9999, "stale")
	if err := dst.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if got, _ := dst.Digest(); got != want {
		t.Fatal("restored digest differs from the snapshot source")
	}
	if m := dst.Meta(); m != wantMeta {
		t.Fatalf("restored meta %+v, want %+v", m, wantMeta)
	}
	if readState(t, dst, "stale").Found || readState(t, dst, "c").Found {
		t.Fatal("restore kept state that is not in the snapshot")
	}
	// The restored store keeps working and survives a clean reopen.
	putStates(t, dst, 7, 300, "d")
	path := dst.Path()
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	re, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	if !readState(t, re, "d").Found || !readState(t, re, "a").Found || re.Meta().AppliedIndex != 7 {
		t.Fatal("restored store lost data across reopen")
	}
}

func TestRestoreRejectsBadStreams(t *testing.T) {
	src, _ := openTemp(t, Options{})
	putStates(t, src, 5, 100, "a")
	snap := snapshotBytes(t, src)
	flipped := bytes.Clone(snap)
	flipped[len(flipped)/2] ^= 0xFF

	for _, tc := range []struct {
		name   string
		stream []byte
		error  string
	}{
		{"empty", nil, "read header"},
		{"garbage", bytes.Repeat([]byte("garbage!"), 100), "bad magic"},
		{"header only", snap[:16], "truncated"},
		{"truncated body", snap[:len(snap)/2], "truncated"},
		{"missing checksum", snap[:len(snap)-10], "checksum"},
		{"flipped byte", flipped, "checksum mismatch"},
		{"trailing data", append(bytes.Clone(snap), 1), "after snapshot checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, _ := openTemp(t, Options{})
			putStates(t, dst, 9, 900, "mine")
			before, _ := dst.Digest()
			err := dst.Restore(bytes.NewReader(tc.stream))
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Restore = %v, want error containing %q", err, tc.error)
			}
			after, _ := dst.Digest()
			if before != after || dst.Meta().AppliedIndex != 9 {
				t.Fatal("failed restore changed the state")
			}
			if exists(dst.Path() + ".restore") {
				t.Fatal("temporary restore file left behind")
			}
			putStates(t, dst, 10, 1000, "still-writable")
		})
	}
}

func TestRestoreRejectsInconsistentFile(t *testing.T) {
	// A stream with a valid envelope around a damaged bbolt file: only the
	// structural check can catch it.
	src, _ := openTemp(t, Options{})
	putStates(t, src, 5, 100, "a", "b", "c")
	snap := snapshotBytes(t, src)
	size := len(snap) - 16 - 32
	file := bytes.Clone(snap[16 : 16+size])
	for i := 4096 * 2; i < len(file); i++ {
		file[i] = 0 // zero every data page
	}
	var buf bytes.Buffer
	buf.Write(snap[:16])
	buf.Write(file)
	sum := sha256Sum(file)
	buf.Write(sum[:])

	dst, _ := openTemp(t, Options{})
	putStates(t, dst, 9, 900, "mine")
	if err := dst.Restore(&buf); err == nil {
		t.Fatal("Restore accepted a structurally broken file")
	}
	if !readState(t, dst, "mine").Found {
		t.Fatal("failed restore lost state")
	}
}

// TestRestoreRejectsSnapshotMissingItsLastPage: a well-formed stream (size
// and checksum agree) around a file that lacks only its last page, as a
// sender that stopped copying one page early would send, is refused before
// bbolt reads past the file's end, and the live state is kept.
func TestRestoreRejectsSnapshotMissingItsLastPage(t *testing.T) {
	src, _ := openTemp(t, Options{})
	var keys []string
	for i := 0; i < 200; i++ {
		keys = append(keys, strings.Repeat("k", 40)+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	putStates(t, src, 5, 100, keys...)
	snap := snapshotBytes(t, src)
	file := snap[16 : len(snap)-sha256.Size]
	page := int(binary.LittleEndian.Uint32(file[16+8:])) // meta: page header, magic, version, page size
	if page < 512 || len(file)%page != 0 || len(file) < 6*page {
		t.Fatalf("snapshot file of %d bytes, page size %d: not what this test expects", len(file), page)
	}
	short := file[:len(file)-page]
	var buf bytes.Buffer
	buf.Write(snap[:8])
	buf.Write(binary.BigEndian.AppendUint64(nil, uint64(len(short))))
	buf.Write(short)
	sum := sha256Sum(short)
	buf.Write(sum[:])

	dst, _ := openTemp(t, Options{})
	putStates(t, dst, 9, 900, "mine")
	before, _ := dst.Digest()
	err := dst.Restore(&buf)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Restore of a snapshot missing its last page = %v, want ErrCorrupt (truncated)", err)
	}
	if after, _ := dst.Digest(); after != before || dst.Meta().AppliedIndex != 9 {
		t.Fatal("failed restore changed the state")
	}
	if exists(dst.Path() + ".restore") {
		t.Fatal("temporary restore file left behind")
	}
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
