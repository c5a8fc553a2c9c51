package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/limitd/limitd/cluster/backup"
)

const snapshotUsage = `Usage: limitd snapshot save|restore|inspect [flags] FILE

  save FILE        take a consistent snapshot of the replicated state (keys,
                   policies, request ids, applied index) from the leader of a
                   running cluster (admin: --token); the file is verified
                   before it is put in place
  restore FILE --data-dir DIR [--node-id ID] [--raft-addr HOST:PORT]
                   build a fresh single-node data directory from FILE; start
                   it with "limitd serve" and the same --data-dir, --node-id
                   and --raft-addr (no --join), then grow the cluster by
                   starting other nodes with --join
  inspect FILE     verify FILE and print what it holds

A damaged or truncated file is refused (the file carries lengths and
SHA-256 checksums).

Example:
  limitd snapshot save --addr 10.0.0.1:8080 --token "$TOKEN" backup.limitd
  limitd snapshot inspect backup.limitd
  limitd snapshot restore --data-dir /var/lib/limitd-new --node-id n1 \
      --raft-addr 10.0.0.9:8300 backup.limitd

Flags:
`

func runSnapshot(args []string, env Env) int {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	dataDir := fs.String("data-dir", "", "restore: the new data directory (must not exist or be empty)")
	nodeID := fs.String("node-id", "", "restore: the restored node's id (default: --raft-addr, as for serve)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:8300", "restore: the restored node's Raft address (serve's --raft-advertise, else --raft-addr)")
	logStore := fs.String("log-store", "", "restore: Raft log store, wal (default) or boltdb")
	sub, pos, code, ok := parseSubcommand(env, "snapshot", snapshotUsage, fs, args, "save", "restore", "inspect")
	if !ok {
		return code
	}
	name := "snapshot " + sub
	if len(pos) != 1 {
		return usageError(env, name, "want exactly one FILE, got %d arguments", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	file := pos[0]
	switch sub {
	case "save":
		return snapshotSave(env, &cf, file)
	case "inspect":
		if isArchiveFile(file) { // snapshotgroups.go
			m, ss, err := inspectArchiveFile(file)
			if err != nil {
				return fail(env, name, err)
			}
			printArchive(env, &cf, file, m, ss)
			return ExitOK
		}
		s, err := inspectFile(file)
		if err != nil {
			return fail(env, name, err)
		}
		printSummary(env, &cf, file, s)
		return ExitOK
	}
	if *dataDir == "" {
		return usageError(env, name, "--data-dir is required")
	}
	if isArchiveFile(file) {
		return restoreArchiveFile(env, &cf, name, file, backup.RestoreConfig{DataDir: *dataDir, NodeID: *nodeID, RaftAddr: *raftAddr, LogStore: *logStore})
	}
	f, err := os.Open(file)
	if err != nil {
		return fail(env, name, err)
	}
	defer f.Close()
	h, err := backup.Restore(backup.RestoreConfig{DataDir: *dataDir, NodeID: *nodeID, RaftAddr: *raftAddr, LogStore: *logStore}, f)
	if err != nil {
		return fail(env, name, fmt.Errorf("%s: %w", file, err))
	}
	id := *nodeID
	if id == "" {
		id = *raftAddr
	}
	if cf.output == "json" {
		printJSON(env.Stdout, map[string]any{"data_dir": *dataDir, "node_id": id, "raft_addr": *raftAddr, "index": h.Index, "term": h.Term})
		return ExitOK
	}
	fmt.Fprintf(env.Stdout, "restored index %d (term %d) into %s as node %s at %s\n", h.Index, h.Term, *dataDir, id, *raftAddr)
	fmt.Fprintf(env.Stdout, "start it with: limitd serve --data-dir %s --node-id %s --raft-addr %s [--http-addr …]\n", *dataDir, id, *raftAddr)
	return ExitOK
}

// snapshotSave streams the backup into FILE.part, verifies it completely,
// then renames it into place, so FILE is never a partial backup.
func snapshotSave(env Env, cf *connFlags, file string) int {
	const name = "snapshot save"
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	part := file + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fail(env, name, err)
	}
	_, err = c.Snapshot(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(part)
		return fail(env, name, err)
	}
	if isArchiveFile(part) {
		m, ss, err := inspectArchiveFile(part)
		if err != nil {
			os.Remove(part)
			return fail(env, name, fmt.Errorf("the received archive does not verify: %w", err))
		}
		if err := os.Rename(part, file); err != nil {
			os.Remove(part)
			return fail(env, name, err)
		}
		printArchive(env, cf, file, m, ss)
		return ExitOK
	}
	s, err := inspectFile(part)
	if err != nil {
		os.Remove(part)
		return fail(env, name, fmt.Errorf("the received snapshot does not verify: %w", err))
	}
	if err := os.Rename(part, file); err != nil {
		os.Remove(part)
		return fail(env, name, err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, summaryJSON(file, s))
		return ExitOK
	}
	fmt.Fprintf(env.Stdout, "saved index %d (term %d) from node %s: %d keys, %d policies, %d request ids, %d bytes to %s\n",
		s.Index, s.Term, s.NodeID, s.Keys, len(s.Policies), s.RequestIDs, s.Size, file)
	return ExitOK
}

func inspectFile(path string) (backup.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return backup.Summary{}, err
	}
	defer f.Close()
	s, err := backup.Inspect(f, filepath.Dir(path))
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func summaryJSON(file string, s backup.Summary) map[string]any {
	names := make([]string, 0, len(s.Policies))
	for _, p := range s.Policies {
		names = append(names, p.Name)
	}
	return map[string]any{"file": file, "format": s.Format, "index": s.Index, "term": s.Term, "node_id": s.NodeID,
		"created_at": s.CreatedAt, "members": s.Members, "keys": s.Keys, "request_ids": s.RequestIDs,
		"policies": names, "nodes": s.Nodes, "digest": s.Digest, "state_index": s.StateIndex, "size_bytes": s.Size}
}

func printSummary(env Env, cf *connFlags, file string, s backup.Summary) {
	if cf.output == "json" {
		printJSON(env.Stdout, summaryJSON(file, s))
		return
	}
	names := make([]string, 0, len(s.Policies))
	for _, p := range s.Policies {
		names = append(names, p.Name)
	}
	tw := newTable(env.Stdout)
	fmt.Fprintf(tw, "file\t%s (%d bytes, format %d)\n", file, s.Size, s.Format)
	fmt.Fprintf(tw, "index\t%d (term %d)\n", s.Index, s.Term)
	fmt.Fprintf(tw, "taken\t%s on node %s\n", s.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"), s.NodeID)
	fmt.Fprintf(tw, "keys\t%d\n", s.Keys)
	fmt.Fprintf(tw, "request ids\t%d\n", s.RequestIDs)
	fmt.Fprintf(tw, "policies\t%d %s\n", len(names), strings.Join(names, " "))
	var members []string
	for _, m := range s.Members {
		members = append(members, m.ID+"@"+m.RaftAddr)
	}
	fmt.Fprintf(tw, "members\t%s\n", strings.Join(members, " "))
	ids := make([]string, 0, len(s.Nodes))
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var nodes []string
	for _, id := range ids {
		nodes = append(nodes, id+"="+s.Nodes[id])
	}
	fmt.Fprintf(tw, "http addresses\t%s\n", strings.Join(nodes, " "))
	fmt.Fprintf(tw, "digest\t%s at state index %d\n", s.Digest, s.StateIndex)
	tw.Flush()
	// What a restored node's GET /v1/cluster/digest is compared with.
	fmt.Fprintf(env.Stdout, "\nThe digest covers the keys, request ids, policies, domains, the clock and the HTTP addresses\n"+
		"above. A node restored from this file reports it at state index %d until it applies new entries;\n"+
		"restored with a node id or HTTP address not listed above, it registers itself at start, which\n"+
		"changes the digest (and the index).\n", s.StateIndex)
}
