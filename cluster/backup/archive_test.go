package backup

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// rawBackup is a part whose bytes are given (nodeapi.Backup).
type rawBackup struct {
	b           []byte
	index, term uint64
	closed      *int
}

func (r rawBackup) Point() (uint64, uint64) { return r.index, r.term }
func (r rawBackup) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.b)
	return int64(n), err
}
func (r rawBackup) Close() error { *r.closed++; return nil }

// An archive is its manifest (epoch, each group's point, slots, size and
// SHA-256) then the parts in order; every part's digest is checked, so a
// part changed after the archive was written is refused naming its group,
// and a damaged manifest is refused before any part is read.
func TestArchiveManifestAndDigests(t *testing.T) {
	closed := 0
	parts := []ArchivePart{
		{ID: 0, Backup: rawBackup{b: []byte("group zero"), index: 7, term: 2, closed: &closed}},
		{ID: 1, Slots: [][2]uint16{{0, 2047}}, Backup: rawBackup{b: []byte("first data group"), index: 9, term: 3, closed: &closed}},
		{ID: 2, Slots: [][2]uint16{{2048, 4095}}, Backup: rawBackup{b: []byte("second"), index: 4, term: 3, closed: &closed}},
	}
	a, err := NewArchive(t.TempDir(), "n1", 5, parts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if closed != 3 {
		t.Errorf("%d of 3 part backups closed after spooling", closed)
	}
	if i, term := a.Point(); i != 7 || term != 2 {
		t.Errorf("point %d/%d, want group 0's 7/2", i, term)
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	file := buf.Bytes()
	if !IsArchive(file) {
		t.Fatal("not an archive")
	}
	read := func(b []byte) (Manifest, []string, error) {
		r := bytes.NewReader(b)
		m, err := ReadManifest(r)
		if err != nil {
			return m, nil, err
		}
		var got []string
		err = eachPart(m, r, func(g ManifestGroup, part io.Reader) error {
			p, err := io.ReadAll(part)
			got = append(got, string(p))
			return err
		})
		return m, got, err
	}
	m, got, err := read(file)
	if err != nil || m.SlotEpoch != 5 || m.NodeID != "n1" || len(m.Groups) != 3 || m.Groups[1].Index != 9 ||
		m.Groups[2].Slots[0] != [2]uint16{2048, 4095} || m.Groups[1].Size != int64(len("first data group")) ||
		strings.Join(got, "|") != "group zero|first data group|second" {
		t.Fatalf("read back %+v %q %v", m, got, err)
	}

	damaged := bytes.Clone(file)
	damaged[len(damaged)-3] ^= 1 // in group 2's part
	if _, _, err := read(damaged); err == nil || !strings.Contains(err.Error(), "group 2's part has SHA-256") {
		t.Errorf("a changed part: %v", err)
	}
	damaged = bytes.Clone(file)
	damaged[20] ^= 1 // in the manifest
	if _, _, err := read(damaged); err == nil || !strings.Contains(err.Error(), "manifest checksum mismatch") {
		t.Errorf("a changed manifest: %v", err)
	}
	if _, _, err := read(file[:len(file)-4]); err == nil {
		t.Error("a truncated archive was read whole")
	}
}
