package main

import (
	"flag"
	"fmt"

	"github.com/limitd/limitd/client"
)

const clusterUsage = `Usage: limitd cluster status|members|join|remove [flags]

  status                                   the leader's view: leader, term, indexes, members
  members                                  the members only
  join --id ID --raft-addr H:P --http-addr H:P
                                           add a voter (admin; a new node usually
                                           joins itself with serve --join)
  remove ID                                remove a member (admin)

Example:
  limitd cluster status --addr 10.0.0.1:8080,10.0.0.2:8080
  limitd cluster remove n3 --token "$TOKEN"

Flags:
`

func runCluster(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	var cf connFlags
	id := fs.String("id", "", "join: the new node's id (its serve --node-id)")
	raftAddr := fs.String("raft-addr", "", "join: the new node's Raft address, host:port")
	httpAddr := fs.String("http-addr", "", "join: the new node's HTTP address, host:port")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "cluster", clusterUsage, fs, args, "status", "members", "join", "remove")
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
	case "join":
		if err := c.Join(ctx, *id, *raftAddr, *httpAddr); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.stdout, map[string]string{"joined": *id})
		} else {
			fmt.Fprintf(env.stdout, "node %q joined\n", *id)
		}
		return exitOK
	case "remove":
		if err := c.Remove(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.stdout, map[string]string{"removed": pos[0]})
		} else {
			fmt.Fprintf(env.stdout, "node %q removed\n", pos[0])
		}
		return exitOK
	}
	st, err := c.Cluster(ctx)
	if err != nil {
		return fail(env, name, err)
	}
	if publicView(st) {
		fmt.Fprintln(env.stderr, "limitd: the public view: Raft addresses, terms, indexes and health need --token (LIMITD_ADMIN_TOKEN)")
	}
	if cf.output == "json" {
		if sub == "members" {
			printJSON(env.stdout, map[string]any{"members": st.Members})
		} else {
			printJSON(env.stdout, st)
		}
		return exitOK
	}
	if sub == "status" {
		tw := newTable(env.stdout)
		fmt.Fprintf(tw, "answered by\t%s (%s)\n", st.NodeID, st.State)
		fmt.Fprintf(tw, "leader\t%s at %s\n", orDash(st.LeaderID), orDash(st.LeaderHTTPAddr))
		fmt.Fprintf(tw, "term\t%d\n", st.Term)
		fmt.Fprintf(tw, "commit index\t%d\n", st.CommitIndex)
		fmt.Fprintf(tw, "applied index\t%d\n", st.AppliedIndex)
		tw.Flush()
		fmt.Fprintln(env.stdout)
	}
	printMembers(env, st.Members)
	return exitOK
}

// publicView reports whether st is a node's public subset (it runs with an
// admin token the client did not send): no node id, no Raft addresses.
func publicView(st client.ClusterStatus) bool { return st.NodeID == "" }

func printMembers(env cliEnv, ms []client.Member) {
	tw := newTable(env.stdout)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tHTTP ADDR\tSUFFRAGE\tLEADER\tHEALTHY")
	for _, m := range ms {
		healthy := "-"
		if m.Suffrage != "" {
			healthy = fmt.Sprint(m.Healthy)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", m.ID, orDash(m.RaftAddr), orDash(m.HTTPAddr), orDash(m.Suffrage), m.Leader, healthy)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
