package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/limitd/limitd/client"
)

const clusterUsage = `Usage: limitd cluster status|members|slots|groups|join|remove [flags]

  status                                   the leader's view: leader, term, indexes, members
                                           (asked of the leader the answering node names)
  members                                  the members only, with their health
  slots                                    the hash-slot map: each run of slots, its group
                                           and the group's leader (GET /v1/cluster/slots)
  groups                                   the Raft groups: id, leader, replicas, slot count
  join --id ID --raft-addr H:P --http-addr H:P
                                           add a voter (admin; a new node usually
                                           joins itself with serve --join)
  remove ID                                remove a member (admin)

Without a leader (an election, or the quorum lost), status and members ask
every member the answering node knows, and show which answer and which do
not (e.g. "unreachable: connection refused").

Exit status: 0 a leader answered (or was named by the answering node);
3 no leader (no quorum, an election; for slots and groups: a group without
one) or no node reachable; 2 bad flags;
4 other errors; 5 the client's configuration (certificate, scheme, token).

Example:
  limitd cluster status --addr 10.0.0.1:8080,10.0.0.2:8080
  limitd cluster remove n3 --token "$TOKEN"

Flags:
`

func runCluster(args []string, env Env) int {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	var cf connFlags
	id := fs.String("id", "", "join: the new node's id (its serve --node-id)")
	raftAddr := fs.String("raft-addr", "", "join: the new node's Raft address, host:port")
	httpAddr := fs.String("http-addr", "", "join: the new node's HTTP address, host:port")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "cluster", clusterUsage, fs, args, "status", "members", "slots", "groups", "join", "remove")
	if !ok {
		return code
	}
	name := "cluster " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	want := 0
	if sub == "remove" {
		want = 1
	}
	if len(pos) != want {
		if want == 1 {
			return usageError(env, name, "want exactly one node ID, got %d arguments", len(pos))
		}
		return usageError(env, name, "unexpected argument %q", pos[0])
	}
	if sub == "join" && (*id == "" || *raftAddr == "") {
		return usageError(env, name, "--id and --raft-addr are required")
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	switch sub {
	case "slots", "groups": // clusterslots.go
		return printSlots(ctx, env, c, name, sub, cf.output == "json")
	case "join":
		if err := c.Join(ctx, *id, *raftAddr, *httpAddr); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]string{"joined": *id})
		} else {
			fmt.Fprintf(env.Stdout, "node %q joined\n", *id)
		}
		return ExitOK
	case "remove":
		if err := c.Remove(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]string{"removed": pos[0]})
		} else {
			fmt.Fprintf(env.Stdout, "node %q removed\n", pos[0])
		}
		return ExitOK
	}
	st, err := c.Cluster(ctx)
	if err != nil {
		return fail(env, name, err)
	}
	public := publicView(st)
	noLeader := st.LeaderID == "" && st.LeaderHTTPAddr == ""
	if noLeader && !public {
		// The answering node cannot say how the others are: ask each. The
		// exit status below says there is no leader whatever they answer.
		probeMembers(ctx, c, &st)
	}
	if public {
		fmt.Fprintln(env.Stderr, "limitd: the public view: the answering node's id, Raft addresses, terms, indexes and health need --token (LIMITD_ADMIN_TOKEN)")
	} else if st.State != client.StateLeader {
		// Client.Cluster asks the leader; this is a follower's view because
		// there is no leader or it did not answer.
		fmt.Fprintf(env.Stderr, "limitd: answered by %s (%s), not the leader: it cannot know the other followers' health (shown as unknown)\n",
			st.NodeID, st.State)
	}
	code = ExitOK
	if noLeader {
		// No leader: nothing can be decided or written. A script polling
		// status must see it without parsing the table.
		fmt.Fprintf(env.Stderr, "limitd %s: no leader: the cluster cannot decide checks or take writes (quorum lost, or an election in progress)\n", name)
		code = ExitUnavailable
	}
	if cf.output == "json" {
		if sub == "members" {
			printJSON(env.Stdout, map[string]any{"members": st.Members})
		} else {
			printJSON(env.Stdout, st)
		}
		return code
	}
	if sub == "status" {
		printStatus(env, st, public)
		fmt.Fprintln(env.Stdout)
	}
	printMembers(env, st.Members, public)
	return code
}

// probeWait bounds the question to each member when there is no leader.
const probeWait = time.Second

// probeMembers replaces the "unknown" health of the members other than the
// answering node with what asking each of them directly found: "up
// (Follower)", "up (Candidate)" or "unreachable: connection refused".
func probeMembers(ctx context.Context, c *client.Client, st *client.ClusterStatus) {
	var wg sync.WaitGroup
	for i := range st.Members {
		m := &st.Members[i]
		if m.ID == st.NodeID {
			m.Health = "up (" + orUnknown(st.State) + ", answered)"
			continue
		}
		if m.HTTPAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeWait)
			defer cancel()
			ns, err := c.NodeStatus(pctx, m.HTTPAddr)
			if err != nil {
				m.Health = "unreachable: " + probeFailure(err)
				return
			}
			m.Health = "up (" + orUnknown(ns.State) + ")"
		}()
	}
	wg.Wait()
}

// probeFailure is why a member did not answer, in few words.
func probeFailure(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within " + probeWait.String()
	}
	return strings.TrimPrefix(err.Error(), "limitd: ")
}

// needsToken stands where the public view has no value.
const needsToken = "(needs --token)"

// printStatus prints the header of cluster status. The public view has no
// node id, term or indexes: it says so instead of printing zeros.
func printStatus(env Env, st client.ClusterStatus, public bool) {
	tw := newTable(env.Stdout)
	switch {
	case !public:
		fmt.Fprintf(tw, "answered by\t%s (%s)\n", st.NodeID, st.State)
	case st.State == client.StateLeader && st.LeaderID != "":
		fmt.Fprintf(tw, "answered by\t%s (%s)\n", st.LeaderID, st.State)
	default:
		fmt.Fprintf(tw, "answered by\ta %s %s\n", orUnknown(st.State), needsToken)
	}
	if st.LeaderID == "" {
		fmt.Fprintf(tw, "leader\tnone known to this node\n")
	} else {
		fmt.Fprintf(tw, "leader\t%s at %s\n", st.LeaderID, orUnknown(st.LeaderHTTPAddr))
	}
	if public {
		fmt.Fprintf(tw, "term\t%s\n", needsToken)
		fmt.Fprintf(tw, "commit index\t%s\n", needsToken)
		fmt.Fprintf(tw, "applied index\t%s\n", needsToken)
	} else {
		fmt.Fprintf(tw, "term\t%d\n", st.Term)
		fmt.Fprintf(tw, "commit index\t%d\n", st.CommitIndex)
		fmt.Fprintf(tw, "applied index\t%d\n", st.AppliedIndex)
	}
	tw.Flush()
}

// publicView reports whether st is a node's public subset (it runs with an
// admin token the client did not send): no node id, no Raft addresses.
func publicView(st client.ClusterStatus) bool { return st.NodeID == "" }

// printMembers prints the member table; the public view has only ids, HTTP
// addresses and the leader, so the other columns are left out rather than
// filled with placeholders.
func printMembers(env Env, ms []client.Member, public bool) {
	tw := newTable(env.Stdout)
	if public {
		fmt.Fprintln(tw, "ID\tHTTP ADDR\tLEADER")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%s\t%v\n", m.ID, orUnknown(m.HTTPAddr), m.Leader)
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tHTTP ADDR\tSUFFRAGE\tLEADER\tHEALTH")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", m.ID, m.RaftAddr, orUnknown(m.HTTPAddr), m.Suffrage, m.Leader, m.Health)
	}
	tw.Flush()
}

// orUnknown names a value the node does not know (an HTTP address not yet
// registered, a state not reported) rather than printing it blank.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
