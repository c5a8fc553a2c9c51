package cluster

import (
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// verifiedRaft is the hashicorp/raft release the files in raftDependents were
// verified against: their correctness rests on its internals, not only on
// its API, so a new release must be read against each before the pin moves.
const verifiedRaft = "v1.7.3"

// raftDependents: each file (from the module root) and what it assumes of
// verifiedRaft.
var raftDependents = map[string]string{
	"cluster/ahead.go": "apply-ahead: the leader stores an entry in its own log (dispatchLogs: StoreLogs) " +
		"before it sends it to any follower, so a follower holding an entry of the leader's term means two logs hold it",
	"cluster/raftnet/pipeline.go": "works around pipelineDecode returning on the first unsuccessful response, " +
		"after which netPipeline.AppendEntries blocks until Close",
	"cluster/raftnet/guard.go": "parses NetworkTransport's framing: the RPC type bytes, and each request's fields " +
		"and msgpack types as commands.go's structs encode with net_transport.go's handle (rpcFields)",
}

// Fails when the hashicorp/raft this binary was compiled from, or go.mod's
// requirement, is not verifiedRaft: then the files above must be checked
// against the new release (their notes say what to check), and the pin moved.
func TestRaftVersionIsTheVerifiedOne(t *testing.T) {
	for file := range raftDependents {
		if _, err := os.Stat("../" + file); err != nil {
			t.Errorf("raftDependents names %s: %v (moved? update the list)", file, err)
		}
	}
	explain := func(what, got string) {
		t.Errorf("%s hashicorp/raft %s, but these files were verified against %s only:", what, got, verifiedRaft)
		for file, why := range raftDependents {
			t.Errorf("  %s: %s", file, why)
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/hashicorp/raft\s+(\S+)`).FindSubmatch(mod)
	switch {
	case m == nil:
		t.Errorf("go.mod requires no hashicorp/raft")
	case string(m[1]) != verifiedRaft:
		explain("go.mod requires", string(m[1]))
	}
	if regexp.MustCompile(`(?m)^\s*(?:replace\s+)?github\.com/hashicorp/raft\s.*=>`).Match(mod) {
		explain("go.mod replaces", "(a replace directive)")
	}
	// What was compiled: a test binary's build info lists no modules, but
	// raft's source file names carry its module version.
	file, _ := runtime.FuncForPC(reflect.ValueOf(raft.NewRaft).Pointer()).FileLine(0)
	if !strings.Contains(file, "hashicorp/raft@"+verifiedRaft+"/") {
		explain("this test binary was built with", "from "+file)
	}
}
