package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/client"
)

// slotsNode answers GET /v1/cluster (itself the leader) and GET
// /v1/cluster/slots with v.
func slotsNode(t *testing.T, v *client.ClusterSlots) string {
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/cluster":
			json.NewEncoder(w).Encode(client.ClusterStatus{NodeID: "n1", State: "Leader", LeaderID: "n1", LeaderHTTPAddr: addr})
		case "/v1/cluster/slots":
			json.NewEncoder(w).Encode(v)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	addr = strings.TrimPrefix(srv.URL, "http://")
	return addr
}

// cluster slots lists the runs in slot order with their group and leader
// (and its HTTP address); cluster groups one line per group with its slot
// count; --output json both; a group without a leader exits 3 naming it.
func TestClusterSlotsAndGroups(t *testing.T) {
	v := &client.ClusterSlots{Epoch: 4, Groups: []client.SlotGroup{
		{ID: 0, Leader: "n1", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{}},
		{ID: 1, Leader: "n2", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{2048, 4095}}},
		{ID: 2, Leader: "n1", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{0, 2047}}}},
		Nodes: []client.SlotNode{{ID: "n1", HTTP: "10.0.0.1:8080"}, {ID: "n2", HTTP: "10.0.0.2:8080"}}}
	addr := slotsNode(t, v)

	code, out, errs := runCLI("cluster", "slots", "--addr", addr)
	if code != ExitOK {
		t.Fatalf("slots: exit %d: %s", code, errs)
	}
	want := "epoch 4\nSLOTS      GROUP  LEADER\n0-2047     2      n1 at 10.0.0.1:8080\n2048-4095  1      n2 at 10.0.0.2:8080\n"
	if out != want {
		t.Errorf("slots:\n%s\nwant:\n%s", out, want)
	}
	code, out, errs = runCLI("cluster", "groups", "--addr", addr)
	if code != ExitOK {
		t.Fatalf("groups: exit %d: %s", code, errs)
	}
	want = "epoch 4\nGROUP  LEADER               REPLICAS  SLOTS\n0      n1 at 10.0.0.1:8080  n1,n2     0\n" +
		"1      n2 at 10.0.0.2:8080  n1,n2     2048\n2      n1 at 10.0.0.1:8080  n1,n2     2048\n"
	if out != want {
		t.Errorf("groups:\n%s\nwant:\n%s", out, want)
	}
	code, out, _ = runCLI("cluster", "groups", "--addr", addr, "--output", "json")
	var g struct {
		Epoch  uint64 `json:"epoch"`
		Groups []struct {
			ID        uint32 `json:"id"`
			Leader    string `json:"leader"`
			SlotCount int    `json:"slot_count"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &g); code != ExitOK || err != nil || g.Epoch != 4 || len(g.Groups) != 3 ||
		g.Groups[1].Leader != "n2" || g.Groups[1].SlotCount != 2048 || g.Groups[0].SlotCount != 0 {
		t.Errorf("groups json: exit %d %v %+v\n%s", code, err, g, out)
	}
	code, out, _ = runCLI("cluster", "slots", "--addr", addr, "--output", "json")
	var s client.ClusterSlots
	if err := json.Unmarshal([]byte(out), &s); code != ExitOK || err != nil || s.Epoch != 4 || len(s.Nodes) != 2 || s.Groups[2].Slots[0] != [2]uint16{0, 2047} {
		t.Errorf("slots json: exit %d %v %+v", code, err, s)
	}

	v.Groups[1].Leader = ""
	code, out, errs = runCLI("cluster", "groups", "--addr", addr)
	if code != ExitUnavailable || !strings.Contains(errs, "no leader in group 1") || !strings.Contains(out, "1      none") {
		t.Errorf("a group without a leader: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
}
