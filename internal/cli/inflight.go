package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/limitd/limitd/client"
)

// runKeysInflight is `limitd keys inflight KEY [--policy NAME | --plan-limit
// NAME] [--limit N]`: the key's held slots and open reservations, each with
// its expiry; the last line counts them as of the node's leader time.
func runKeysInflight(env Env, cf *connFlags, policy, planLimit string, limit int, pos []string) int {
	const name = "keys inflight"
	if len(pos) != 1 {
		return usageError(env, name, "want one argument, the key; got %d", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	if policy != "" && planLimit != "" {
		return usageError(env, name, "give --policy NAME or --plan-limit NAME, not both")
	}
	if limit < 1 || limit > 1000 {
		return usageError(env, name, "--limit %d: want 1 to 1000", limit)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	v, err := c.Inflight(ctx, client.InflightQuery{Key: pos[0], Policy: policy, Limit: planLimit, Max: limit})
	if err != nil {
		return fail(env, name, err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, v)
		return ExitOK
	}
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
	tw := newTable(env.Stdout)
	if v.Concurrency {
		fmt.Fprintln(tw, "SLOT\tACQUIRED\tEXPIRES\tIN")
		for _, s := range v.Slots {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strconv.Quote(s.Slot), ts(s.Acquired), ts(s.Expires), s.ExpiresIn)
		}
	}
	_ = tw.Flush()
	if len(v.Reservations) > 0 {
		tw = newTable(env.Stdout) // a table of its own: its columns are not the slots'
		fmt.Fprintln(tw, "RESERVATION\tESTIMATE\tEXPIRES\tIN")
		for _, r := range v.Reservations {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Reservation, r.Cost, ts(r.Expires), r.ExpiresIn)
		}
		_ = tw.Flush()
	}
	limitName := fmt.Sprintf("policy %q", v.Policy)
	if v.Policy == "" {
		limitName = fmt.Sprintf("plan %q limit %q", v.Plan, v.Limit)
	}
	more := ""
	if v.MoreReservations {
		more = " (and more not listed)"
	}
	fmt.Fprintf(env.Stdout, "key %q, %s, at %s: %d slots held, %d open reservations%s\n",
		v.Key, limitName, ts(v.At), v.SlotsHeld, len(v.Reservations), more)
	return ExitOK
}
