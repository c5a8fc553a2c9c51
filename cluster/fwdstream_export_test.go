package cluster

import "github.com/limitd/limitd/cluster/forward"

// Check-stream internals for the external tests (package cluster_test).

// PathCheckStream is the check stream's Upgrade endpoint.
const PathCheckStream = forward.PathCheckStream

// StreamProto is the check stream's Upgrade token.
const StreamProto = forward.StreamProto

// MaxStreamRequest bounds a request frame after its length prefix.
const MaxStreamRequest = forward.MaxStreamRequest

// CloseStreams closes every check stream n serves as leader, as a dropped
// connection would, and returns how many it closed.
func CloseStreams(n *Node) int { return n.fwdSrv.CloseStreams() }

// SetStreamBeforeDecide makes n run hook before it decides each request of
// the check streams it accepts from now on.
func SetStreamBeforeDecide(n *Node, hook func()) { n.fwdSrv.SetBeforeDecide(hook) }

// SetStreamDropAnswers makes the check streams n serves as leader drop their
// successful answers (drop true), as if every one were lost on the way.
func SetStreamDropAnswers(n *Node, drop bool) { n.fwdSrv.SetDropAnswers(drop) }

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
