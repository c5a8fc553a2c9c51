package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/limitd/limitd/nodeapi"
)

// A node with data groups backs up every group in one archive:
//
//	magic "LMTDGRP1" (8) ‖ manifest length uint32 ‖ manifest (JSON) ‖ SHA-256 of the manifest (32)
//	‖ group backup ‖ group backup ‖ …
//
// each group backup a one-group backup file (the format above), in the
// manifest's order, of the manifest's size and SHA-256. The manifest comes
// first so that a reader knows every part before reading one, and each
// part's digest lets a restore refuse a damaged group before it serves.
var archiveMagic = [8]byte{'L', 'M', 'T', 'D', 'G', 'R', 'P', '1'}

// ArchiveFormat is the version of the manifest.
const ArchiveFormat = 1

// Manifest describes an archive of every group of a cluster with data groups.
type Manifest struct {
	Format    int       `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	NodeID    string    `json:"node_id"` // the node that took it
	// SlotEpoch is the slot map's epoch (the map itself is group 0's state).
	SlotEpoch uint64          `json:"slot_epoch"`
	Groups    []ManifestGroup `json:"groups"`
}

// ManifestGroup is one group's part: the Raft point its state reflects,
// the slots it owns, and the part's size and SHA-256 (hex).
type ManifestGroup struct {
	ID     uint32      `json:"id"`
	Index  uint64      `json:"index"`
	Term   uint64      `json:"term"`
	Slots  [][2]uint16 `json:"slots"`
	Size   int64       `json:"size"`
	SHA256 string      `json:"sha256"`
}

// ArchivePart is one group's backup for NewArchive.
type ArchivePart struct {
	ID     uint32
	Slots  [][2]uint16
	Backup nodeapi.Backup
}

// Archive is an archive ready to stream: each group's backup spooled to a
// file in dir (its digest must be in the manifest, before the bytes).
type Archive struct {
	Manifest Manifest
	files    []*os.File
	index    uint64
	term     uint64
}

// NewArchive spools each part's backup (closing it) into a temporary file
// under dir and builds the manifest. Close removes the files.
func NewArchive(dir, nodeID string, slotEpoch uint64, parts []ArchivePart) (*Archive, error) {
	a := &Archive{Manifest: Manifest{Format: ArchiveFormat, CreatedAt: time.Now().UTC(), NodeID: nodeID, SlotEpoch: slotEpoch}}
	for _, p := range parts {
		f, err := os.CreateTemp(dir, "limitd-archive-"+strconv.FormatUint(uint64(p.ID), 10)+"-")
		if err != nil {
			closeParts(parts)
			a.Close()
			return nil, fmt.Errorf("archive: %w", err)
		}
		a.files = append(a.files, f)
		h := sha256.New()
		n, err := p.Backup.WriteTo(io.MultiWriter(f, h))
		idx, term := p.Backup.Point()
		p.Backup.Close()
		p.Backup = nil
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			closeParts(parts)
			a.Close()
			return nil, fmt.Errorf("archive: group %d: %w", p.ID, err)
		}
		slots := p.Slots
		if slots == nil {
			slots = [][2]uint16{}
		}
		a.Manifest.Groups = append(a.Manifest.Groups, ManifestGroup{ID: p.ID, Index: idx, Term: term, Slots: slots,
			Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		if p.ID == 0 {
			a.index, a.term = idx, term
		}
	}
	return a, nil
}

func closeParts(parts []ArchivePart) {
	for _, p := range parts {
		if p.Backup != nil {
			p.Backup.Close()
		}
	}
}

// Point is group 0's (nodeapi.Backup).
func (a *Archive) Point() (index, term uint64) { return a.index, a.term }

// WriteTo writes the archive.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	m, err := json.Marshal(a.Manifest)
	if err != nil {
		return 0, fmt.Errorf("archive manifest: %w", err)
	}
	n, err := w.Write(frame(archiveMagic, m))
	total := int64(n)
	if err != nil {
		return total, fmt.Errorf("write archive manifest: %w", err)
	}
	for i, f := range a.files {
		c, err := io.Copy(w, f)
		total += c
		if err != nil {
			return total, fmt.Errorf("write archive: group %d: %w", a.Manifest.Groups[i].ID, err)
		}
	}
	return total, nil
}

// Close removes the spooled parts.
func (a *Archive) Close() error {
	for _, f := range a.files {
		f.Close()
		os.Remove(f.Name())
	}
	a.files = nil
	return nil
}

// IsArchive reports whether b (a file's first 8 bytes or more) starts an archive.
func IsArchive(b []byte) bool { return len(b) >= 8 && bytes.Equal(b[:8], archiveMagic[:]) }

// ReadManifest reads and verifies an archive's manifest; r is then at the
// first group's part.
func ReadManifest(r io.Reader) (Manifest, error) {
	var m Manifest
	body, err := readFramed(r, archiveMagic, "archive", "manifest")
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("damaged archive: manifest: %w", err)
	}
	if m.Format != ArchiveFormat {
		return m, fmt.Errorf("archive format %d is not supported (this limitd reads format %d)", m.Format, ArchiveFormat)
	}
	if len(m.Groups) == 0 || m.Groups[0].ID != 0 {
		return m, errors.New("damaged archive: the manifest does not start with group 0")
	}
	return m, nil
}

// eachPart calls f with each group's part as a reader of exactly its size,
// then checks the part's SHA-256 against the manifest (f need not read it
// all: the rest is hashed too).
func eachPart(m Manifest, r io.Reader, f func(g ManifestGroup, part io.Reader) error) error {
	for _, g := range m.Groups {
		h := sha256.New()
		part := io.TeeReader(io.LimitReader(r, g.Size), h)
		if err := f(g, part); err != nil {
			return fmt.Errorf("group %d: %w", g.ID, err)
		}
		if _, err := io.Copy(io.Discard, part); err != nil {
			return fmt.Errorf("group %d: %w", g.ID, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != g.SHA256 {
			return fmt.Errorf("damaged archive: group %d's part has SHA-256 %s, the manifest says %s", g.ID, got, g.SHA256)
		}
	}
	return nil
}

// InspectArchive verifies an archive completely (the manifest, and each
// group's part as Inspect verifies a backup, and its digest) and reports
// each group's summary, in the manifest's order.
func InspectArchive(r io.Reader, scratchDir string) (Manifest, []Summary, error) {
	m, err := ReadManifest(r)
	if err != nil {
		return m, nil, err
	}
	var out []Summary
	err = eachPart(m, r, func(g ManifestGroup, part io.Reader) error {
		s, err := Inspect(part, scratchDir)
		if err != nil {
			return err
		}
		if s.Index != g.Index || s.Term != g.Term {
			return fmt.Errorf("damaged archive: the part is at index %d term %d, the manifest says %d term %d", s.Index, s.Term, g.Index, g.Term)
		}
		out = append(out, s)
		return nil
	})
	return m, out, err
}

// GroupDir is data group g's directory under a node's data directory
// (group 0's is the data directory itself), as cluster lays them out.
func GroupDir(dataDir string, g uint32) string {
	if g == 0 {
		return dataDir
	}
	return filepath.Join(dataDir, "groups", strconv.FormatUint(uint64(g), 10))
}

// RestoreArchive builds a fresh data directory of a node with data groups
// from an archive: each group restored as Restore does (this node alone in
// its configuration) into its directory, each part's digest checked before
// the node may serve it. Start the node with the cluster's --data-groups.
// Nothing is left behind on error.
func RestoreArchive(cfg RestoreConfig, r io.Reader) (m Manifest, err error) {
	if entries, err := os.ReadDir(cfg.DataDir); err == nil && len(entries) > 0 {
		return m, fmt.Errorf("restore: data dir %s is not empty: restore into a new directory", cfg.DataDir)
	}
	if m, err = ReadManifest(r); err != nil {
		return m, err
	}
	defer func() {
		if err != nil {
			cleanDir(cfg.DataDir)
		}
	}()
	err = eachPart(m, r, func(g ManifestGroup, part io.Reader) error {
		c := cfg
		c.DataDir = GroupDir(cfg.DataDir, g.ID)
		_, err := Restore(c, part)
		return err
	})
	return m, err
}
