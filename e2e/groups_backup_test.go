package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A backup of a cluster with data groups is one archive of every group:
// `limitd snapshot save` writes it with a manifest (slot map epoch, each
// group's index, term, slots and SHA-256), inspect lists every group's
// keys, a damaged part is refused by restore naming its group and leaving
// nothing behind, and a node restored from it with --data-groups 3 serves
// every group's keys where they were.
func TestProcessDataGroupsBackup(t *testing.T) {
	t.Parallel()
	ps := startDataGroups(t)
	n1 := ps[0]
	if code, body := putJSON(t, n1.URL("/v1/policies/api"), `{"algorithm":"fixed_window","limit":5,"window":"`+crashWindow(30*time.Minute)+`"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	v := getSlots(t, n1)
	groupOf := func(key string) uint32 { return groupOfKey(v, key) }
	var keys []string
	per := map[uint32]int{}
	for i := 0; len(keys) < 6; i++ {
		if k := fmt.Sprintf("acct:%d", i); per[groupOf(k)] < 2 {
			per[groupOf(k)]++
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		for i := 0; i < 3; i++ {
			if code, b := postJSON(t, ps[i].URL("/v1/check"), `{"key":"`+k+`","policy":"api"}`); code != 200 || !strings.Contains(string(b), `"allowed":true`) {
				t.Fatalf("check %s: %d %s", k, code, b)
			}
		}
	}

	file := filepath.Join(t.TempDir(), "cluster.limitd")
	code, out, errOut := runCLI(t, "snapshot", "save", "--addr", ps[1].HTTPAddr, "--output", "json", file)
	if code != 0 {
		t.Fatalf("snapshot save: exit %d: %s%s", code, out, errOut)
	}
	var saved struct {
		SlotEpoch uint64 `json:"slot_epoch"`
		Groups    []struct {
			ID     uint32      `json:"id"`
			Index  uint64      `json:"index"`
			Slots  [][2]uint16 `json:"slots"`
			Size   int64       `json:"size_bytes"`
			SHA256 string      `json:"sha256"`
			Keys   int64       `json:"keys"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &saved); err != nil || saved.SlotEpoch != v.Epoch || len(saved.Groups) != 4 {
		t.Fatalf("saved %v: %s", err, out)
	}
	var offset int64 = -1
	for i, g := range saved.Groups {
		if g.ID != uint32(i) || g.Index == 0 || len(g.SHA256) != 64 {
			t.Errorf("group %+v", g)
		}
		if i > 0 && (g.Keys != 2 || len(g.Slots) != 1) {
			t.Errorf("group %d: %d keys, slots %v; want its 2 keys and its run", g.ID, g.Keys, g.Slots)
		}
	}
	if code, out, errOut := runCLI(t, "snapshot", "inspect", file); code != 0 || !strings.Contains(out, "archive of 4 groups") {
		t.Fatalf("inspect: exit %d: %s%s", code, out, errOut)
	}

	// A byte of the last group's part flipped: refused naming group 3.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	offset = int64(len(b)) - saved.Groups[3].Size/2
	b[offset] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.limitd")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	code, _, errOut = runCLI(t, "snapshot", "restore", "--data-dir", dir, "--node-id", "x", "--raft-addr", "127.0.0.1:1", bad)
	if code == 0 || !strings.Contains(errOut, "group 3") {
		t.Errorf("restore of a damaged archive: exit %d, %q; want a refusal naming group 3", code, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused restore left %d entries", len(entries))
	}

	// The cluster is lost; n1 restored from the archive serves every group.
	for _, p := range ps {
		if err := p.term(); err != nil {
			t.Logf("stop %s: %v", p.ID, err)
		}
	}
	restored := newProc(t, n1.ID, "")
	restored.HTTPAddr, restored.RaftAddr, restored.DataDir = n1.HTTPAddr, n1.RaftAddr, filepath.Join(t.TempDir(), "restored")
	code, out, errOut = runCLI(t, "snapshot", "restore", "--data-dir", restored.DataDir, "--node-id", n1.ID, "--raft-addr", n1.RaftAddr, file)
	if code != 0 || strings.Count(out, "digest verified") != 4 {
		t.Fatalf("snapshot restore: exit %d: %s%s", code, out, errOut)
	}
	restored.start("--data-groups", "3")
	restored.waitReady()
	for _, k := range keys {
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, b := postJSON(t, restored.URL("/v1/check"), `{"key":"`+k+`","policy":"api"}`)
			var d decision
			if code == 200 && json.Unmarshal(b, &d) == nil {
				if !d.Allowed || d.Remaining != 1 {
					t.Errorf("%s (group %d) after restore: %s, want allowed with 1 remaining (3 of 5 spent before)", k, groupOf(k), b)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("check %s after restore: %d %s\n%s", k, code, b, restored.Logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
