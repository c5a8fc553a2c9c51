package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/limitd/limitd/cluster/backup"
)

// A node with data groups answers a snapshot with an archive of every
// group (cluster/backup, archive.go): save verifies it as a whole (each
// group's part and its digest), inspect prints the manifest and each
// group's contents, restore builds every group's directory.

// isArchiveFile reports whether path holds an archive of several groups.
func isArchiveFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8]byte
	n, _ := f.Read(b[:])
	return backup.IsArchive(b[:n])
}

func inspectArchiveFile(path string) (backup.Manifest, []backup.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return backup.Manifest{}, nil, err
	}
	defer f.Close()
	m, ss, err := backup.InspectArchive(f, filepath.Dir(path))
	if err != nil {
		return m, ss, fmt.Errorf("%s: %w", path, err)
	}
	return m, ss, nil
}

func printArchive(env Env, cf *connFlags, file string, m backup.Manifest, ss []backup.Summary) {
	if cf.output == "json" {
		groups := make([]map[string]any, len(m.Groups))
		for i, g := range m.Groups {
			groups[i] = map[string]any{"id": g.ID, "index": g.Index, "term": g.Term, "slots": g.Slots, "size_bytes": g.Size,
				"sha256": g.SHA256, "keys": ss[i].Keys, "request_ids": ss[i].RequestIDs, "digest": ss[i].Digest}
		}
		printJSON(env.Stdout, map[string]any{"file": file, "format": m.Format, "created_at": m.CreatedAt, "node_id": m.NodeID,
			"slot_epoch": m.SlotEpoch, "groups": groups})
		return
	}
	fmt.Fprintf(env.Stdout, "archive of %d groups, slot map epoch %d, taken %s on node %s\n", len(m.Groups), m.SlotEpoch,
		m.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"), m.NodeID)
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "GROUP\tINDEX\tTERM\tSLOTS\tKEYS\tREQUEST IDS\tBYTES\tSHA-256")
	for i, g := range m.Groups {
		n := 0
		for _, r := range g.Slots {
			n += int(r[1]) - int(r[0]) + 1
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", g.ID, g.Index, g.Term, n, ss[i].Keys, ss[i].RequestIDs, g.Size, g.SHA256)
	}
	tw.Flush()
}

// restoreArchiveFile is snapshot restore of an archive.
func restoreArchiveFile(env Env, cf *connFlags, name, file string, cfg backup.RestoreConfig) int {
	f, err := os.Open(file)
	if err != nil {
		return fail(env, name, err)
	}
	defer f.Close()
	m, err := backup.RestoreArchive(cfg, f)
	if err != nil {
		return fail(env, name, fmt.Errorf("%s: %w", file, err))
	}
	id := cfg.NodeID
	if id == "" {
		id = cfg.RaftAddr
	}
	data := len(m.Groups) - 1
	if cf.output == "json" {
		printJSON(env.Stdout, map[string]any{"data_dir": cfg.DataDir, "node_id": id, "raft_addr": cfg.RaftAddr, "groups": m.Groups})
		return ExitOK
	}
	for _, g := range m.Groups {
		fmt.Fprintf(env.Stdout, "restored group %d at index %d (term %d), digest verified\n", g.ID, g.Index, g.Term)
	}
	fmt.Fprintf(env.Stdout, "start it with: limitd serve --data-dir %s --node-id %s --raft-addr %s --data-groups %d [--http-addr …]\n",
		cfg.DataDir, id, cfg.RaftAddr, data)
	return ExitOK
}
