package cluster

// Check-stream internals for the external tests (package cluster_test).

// PathCheckStream is the check stream's Upgrade endpoint.
const PathCheckStream = pathCheckStream

// StreamProto is the check stream's Upgrade token.
const StreamProto = streamProto

// MaxStreamRequest bounds a request frame after its length prefix.
const MaxStreamRequest = maxStreamRequest

// CloseStreams closes every check stream n serves as leader, as a dropped
// connection would, and returns how many it closed.
func CloseStreams(n *Node) int {
	srv := &n.fwd.streams
	srv.mu.Lock()
	var ss []*streamSession
	for s := range srv.sessions {
		ss = append(ss, s)
	}
	srv.mu.Unlock()
	for _, s := range ss {
		s.close("closed by the test")
	}
	return len(ss)
}

// SetStreamBeforeDecide makes n run hook before it decides each request of
// the check streams it accepts from now on.
func SetStreamBeforeDecide(n *Node, hook func()) {
	n.fwd.streams.mu.Lock()
	n.fwd.streams.beforeDecide = hook
	n.fwd.streams.mu.Unlock()
}

// SetStreamDropAnswers makes the check streams n serves as leader drop their
// successful answers (drop true), as if every one were lost on the way.
func SetStreamDropAnswers(n *Node, drop bool) { n.fwd.streams.dropAnswers.Store(drop) }

// AnswersFromLog is how many forwarded requests n answered from its own log
// (ahead.go), and EntriesAhead how many entries it applied ahead of raft.
func AnswersFromLog(n *Node) uint64 {
	if n.ahead == nil {
		return 0
	}
	return n.ahead.answered.Load()
}

func EntriesAhead(n *Node) uint64 {
	if n.ahead == nil {
		return 0
	}
	return n.ahead.entries.Load()
}
