package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

func runCLI(name string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code, _ := Run(name, args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	return code, stdout.String(), stderr.String()
}

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	return addr
}

// statusNode answers GET /v1/cluster with st.
func statusNode(t *testing.T, st *client.ClusterStatus) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// With the quorum lost, cluster status shows the node that answered, asks
// the others (one up as a candidate, one refusing connections) and exits 3.
func TestClusterStatusWithoutLeader(t *testing.T) {
	dead := closedAddr(t)
	n3 := &client.ClusterStatus{NodeID: "n3", State: "Candidate"}
	srv3 := statusNode(t, n3)
	addr3 := strings.TrimPrefix(srv3.URL, "http://")
	n1 := &client.ClusterStatus{NodeID: "n1", State: "Candidate"}
	srv1 := statusNode(t, n1)
	addr1 := strings.TrimPrefix(srv1.URL, "http://")
	members := []client.Member{
		{ID: "n1", RaftAddr: "127.0.0.1:1", HTTPAddr: addr1, Suffrage: "Voter", Health: "healthy", Healthy: true},
		{ID: "n2", RaftAddr: "127.0.0.1:2", HTTPAddr: dead, Suffrage: "Voter", Health: "unknown"},
		{ID: "n3", RaftAddr: "127.0.0.1:3", HTTPAddr: addr3, Suffrage: "Voter", Health: "unknown"},
	}
	n1.Members, n3.Members = members, members
	code, out, errs := runCLI("cluster", "status", "--addr", addr1, "--token", "t")
	if code != ExitUnavailable {
		t.Errorf("exit %d, want %d (no leader)", code, ExitUnavailable)
	}
	for _, want := range []string{"leader         none known to this node", "n1  127.0.0.1:1", "up (Candidate, answered)",
		"unreachable: connection refused", "up (Candidate)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "no leader") {
		t.Errorf("stderr: %s", errs)
	}
	// A leader: exit 0.
	n1.State, n1.LeaderID, n1.LeaderHTTPAddr = "Leader", "n1", addr1
	if code, _, errs := runCLI("cluster", "status", "--addr", addr1, "--token", "t"); code != ExitOK {
		t.Errorf("with a leader: exit %d, %s", code, errs)
	}
}

// Pointed at a dead node, admin commands fail at once, naming the address
// and "connection refused", and never say a policy "may have been counted".
func TestAdminCommandsAgainstDeadNode(t *testing.T) {
	dead := closedAddr(t)
	for _, args := range [][]string{
		{"cluster", "status", "--addr", dead},
		{"policy", "put", "p", "--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--addr", dead},
		{"policy", "get", "p", "--addr", dead},
	} {
		start := time.Now()
		code, _, errs := runCLI(args[0], args[1:]...)
		if code != ExitUnavailable || !strings.Contains(errs, "connection refused to "+dead) || strings.Contains(errs, "counted") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
		// A liveness bound, half the default --timeout (10s).
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%v: took %v", args, el)
		}
	}
}

// A misspelt subcommand gets a suggestion; a flag typo names the flag.
func TestCLITypos(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "stauts"}, `limitd cluster: unknown subcommand "stauts" (did you mean status?)`},
		{[]string{"policy", "lsit"}, `unknown subcommand "lsit" (did you mean list?)`},
		{[]string{"cluster", "frobnicate"}, `unknown subcommand "frobnicate" (want status, members, slots, groups, join or remove)`},
		{[]string{"policy", "put", "p", "--widnow", "1s"}, "unknown flag --widnow (did you mean --window?)"},
		{[]string{"policy", "put", "p", "--algorithm", "fixed_window", "--limit", "1", "--window", "60"}, `invalid duration "60" for --window (want e.g. 60s, 1h30m, 500ms or 7d)`},
		{[]string{"check", "k", "--timeout", "10"}, `invalid duration "10" for --timeout (want e.g. 60s, 1h30m or 500ms)`},
	} {
		code, _, errs := runCLI(c.args[0], c.args[1:]...)
		if code != ExitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, ExitUsage, c.want)
		}
	}
}
