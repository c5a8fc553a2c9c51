package cli

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/limitd/limitd/client"
)

const keysUsage = `Usage: limitd keys list (--policy NAME | --plan NAME [--plan-limit NAME]) [flags]
       limitd keys top (--policy NAME | --plan NAME [--plan-limit NAME]) [--last 5m|1h] [--by allowed|refused] [flags]
       limitd keys inflight KEY [--policy NAME | --plan-limit NAME] [flags]

  list    one page of the keys of a policy or of a plan's limit with their
          usage (admin), from the node's applied state: in key order, or
          --sort used|remaining|refused. The last line names the --cursor of
          the next page, if there is one.
  top     a policy's keys with the most allowed cost, or refusals, over
          the last 5 minutes or hour (admin), from the node's sketch:
          every node holds the whole cluster's (usage.go). Under a plan:
          the checks its keys' plan decided; with --plan-limit, the
          refusals that limit made.
  inflight  a key's held concurrency slots and open reservations, with
          their expiries (admin), from the node's applied state: under a
          policy, or a limit of the key's plan (inflight.go).

Example:
  limitd keys list --policy api --prefix user: --limit 50
  limitd keys list --plan pro --plan-limit daily --sort used --limit 10
  limitd keys list --policy api --cursor dXNlcjo0Mg
  limitd keys top --plan pro --plan-limit daily --by refused --last 1h

Flags:
`

func runKeys(args []string, env Env) int {
	var cf connFlags
	var q client.KeysQuery
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	fs.StringVar(&q.Policy, "policy", "", "the policy whose keys to list")
	fs.StringVar(&q.Plan, "plan", "", "the plan whose keys to list (with --plan-limit when it has several limits)")
	fs.StringVar(&q.PlanLimit, "plan-limit", "", "the plan's limit whose usage to show")
	fs.StringVar(&q.Prefix, "prefix", "", "only keys starting with this")
	fs.StringVar(&q.Sort, "sort", "", "used, remaining or refused (default: key order)")
	fs.IntVar(&q.Limit, "limit", 100, "keys per page, 1 to 1000")
	fs.StringVar(&q.Cursor, "cursor", "", "the cursor a previous page printed")
	last := fs.String("last", "5m", "top: the window, 5m or 1h")
	by := fs.String("by", "allowed", "top: allowed or refused")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "keys", keysUsage, fs, args, "list", "top", "inflight")
	if !ok {
		return code
	}
	if sub == "top" {
		return runKeysTop(env, &cf, client.TopKeysQuery{Policy: q.Policy, Plan: q.Plan, PlanLimit: q.PlanLimit, By: *by, Limit: q.Limit}, *last, pos) // usage.go
	}
	if sub == "inflight" {
		return runKeysInflight(env, &cf, q.Policy, q.PlanLimit, q.Limit, pos) // inflight.go
	}
	const name = "keys list"
	if len(pos) != 0 {
		return usageError(env, name, "want no arguments, got %d", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	if (q.Policy == "") == (q.Plan == "") {
		return usageError(env, name, "give --policy NAME or --plan NAME")
	}
	if q.Limit < 1 || q.Limit > 1000 {
		return usageError(env, name, "--limit %d: want 1 to 1000", q.Limit)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	p, err := c.ListKeys(ctx, q)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.output == "json" {
		type keyJSON struct {
			Key          string `json:"key"`
			Used         int64  `json:"used"`
			Remaining    int64  `json:"remaining"`
			ResetAfterMS int64  `json:"reset_after_ms"`
			Refused      *int64 `json:"refused,omitempty"`
		}
		out := struct {
			Keys         []keyJSON `json:"keys"`
			Cursor       string    `json:"cursor,omitempty"`
			AppliedIndex uint64    `json:"applied_index"`
		}{Keys: make([]keyJSON, len(p.Keys)), Cursor: p.Cursor, AppliedIndex: p.AppliedIndex}
		for i, k := range p.Keys {
			out.Keys[i] = keyJSON{k.Key, k.Used, k.Remaining, k.ResetAfter.Milliseconds(), k.Refused}
		}
		printJSON(env.Stdout, out)
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "KEY\tUSED\tREMAINING\tRESET_AFTER\tREFUSED")
	for _, k := range p.Keys {
		refused := "-"
		if k.Refused != nil {
			refused = strconv.FormatInt(*k.Refused, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", strconv.Quote(k.Key), k.Used, k.Remaining, k.ResetAfter, refused)
	}
	_ = tw.Flush()
	if p.Cursor != "" {
		fmt.Fprintf(env.Stdout, "applied index %d; next page: --cursor %s\n", p.AppliedIndex, p.Cursor)
	} else {
		fmt.Fprintf(env.Stdout, "applied index %d; last page\n", p.AppliedIndex)
	}
	return ExitOK
}
