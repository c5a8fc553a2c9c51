package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/limitd/limitd/client"
)

// printSlots is cluster slots (the map: each run of slots, its group and
// leader) and cluster groups (per group: leader, replicas, slot count). A
// group without a leader cannot decide its keys: exit 3, as status does
// without a leader, so that a script sees it without parsing the table.
func printSlots(ctx context.Context, env Env, c *client.Client, name, sub string, asJSON bool) int {
	v, err := c.Slots(ctx)
	if err != nil {
		return fail(env, name, err)
	}
	code := ExitOK
	var leaderless []string
	for _, g := range v.Groups {
		if g.Leader == "" {
			leaderless = append(leaderless, fmt.Sprint(g.ID))
		}
	}
	if len(leaderless) > 0 {
		fmt.Fprintf(env.Stderr, "limitd %s: no leader in group %s: the keys of its slots cannot be decided (an election, or its quorum lost)\n",
			name, strings.Join(leaderless, ", "))
		code = ExitUnavailable
	}
	http := map[string]string{}
	for _, n := range v.Nodes {
		http[n.ID] = n.HTTP
	}
	leader := func(g client.SlotGroup) string {
		if g.Leader == "" {
			return "none"
		}
		if a := http[g.Leader]; a != "" {
			return g.Leader + " at " + a
		}
		return g.Leader
	}
	if sub == "groups" {
		if asJSON {
			type groupJSON struct {
				client.SlotGroup
				SlotCount int `json:"slot_count"`
			}
			out := struct {
				Epoch  uint64      `json:"epoch"`
				Groups []groupJSON `json:"groups"`
			}{Epoch: v.Epoch, Groups: []groupJSON{}}
			for _, g := range v.Groups {
				out.Groups = append(out.Groups, groupJSON{g, g.SlotCount()})
			}
			printJSON(env.Stdout, out)
			return code
		}
		fmt.Fprintf(env.Stdout, "epoch %d\n", v.Epoch)
		tw := newTable(env.Stdout)
		fmt.Fprintln(tw, "GROUP\tLEADER\tREPLICAS\tSLOTS")
		for _, g := range v.Groups {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\n", g.ID, leader(g), strings.Join(g.Replicas, ","), g.SlotCount())
		}
		tw.Flush()
		return code
	}
	if asJSON {
		printJSON(env.Stdout, v)
		return code
	}
	fmt.Fprintf(env.Stdout, "epoch %d\n", v.Epoch)
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "SLOTS\tGROUP\tLEADER")
	for _, r := range slotRuns(v) {
		fmt.Fprintf(tw, "%d-%d\t%d\t%s\n", r.first, r.last, r.g.ID, leader(r.g))
	}
	tw.Flush()
	return code
}

type slotRun struct {
	first, last uint16
	g           client.SlotGroup
}

// slotRuns is every group's runs in slot order.
func slotRuns(v client.ClusterSlots) []slotRun {
	var out []slotRun
	for _, g := range v.Groups {
		for _, r := range g.Slots {
			out = append(out, slotRun{r[0], r[1], g})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}
