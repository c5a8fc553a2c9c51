package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/client"
)

const usageUsage = `Usage: limitd usage get KEY [--policy NAME | --limit NAME] [flags]
       limitd usage export (--policy NAME | --plan NAME [--plan-limit NAME]) --at TIME [flags]

  get     a key's usage per window of a policy, or of a limit of the key's
          plan (admin): the closed windows its "history" keeps and the
          current one, with what was used and refused (refusals decided
          through the log) in each.
  export  one closed window's usage of every key of a policy or plan limit,
          for billing (admin): csv (key,used,refused,window_start,window_end)
          or jsonl, streamed to stdout (or --out FILE).

TIME is RFC 3339 (2026-12-01T00:00:00Z); any time inside the window names it.

Example:
  limitd usage get user:42 --policy api
  limitd usage get user:42 --limit daily --from 2026-11-01T00:00:00Z
  limitd usage export --plan pro --plan-limit daily --at 2026-11-30T00:00:00Z > nov30.csv

Flags:
`

func runUsage(args []string, env Env) int {
	var cf connFlags
	var policy, limit, plan, planLimit, from, to, window, format, out string
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.StringVar(&policy, "policy", "", "the policy")
	fs.StringVar(&limit, "limit", "", "get: the limit of the key's plan (when the plan has several)")
	fs.StringVar(&plan, "plan", "", "export: the plan")
	fs.StringVar(&planLimit, "plan-limit", "", "export: the plan's limit (when it has several)")
	fs.StringVar(&from, "from", "", "get: windows starting at or after this time")
	fs.StringVar(&to, "to", "", "get: windows starting before this time")
	fs.StringVar(&window, "at", "", "export: a time inside the closed window to export")
	fs.StringVar(&format, "format", "csv", "export: csv or jsonl")
	fs.StringVar(&out, "out", "", "export: write to this file instead of stdout")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "usage", usageUsage, fs, args, "get", "export")
	if !ok {
		return code
	}
	name := "usage " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	parse := func(flagName, v string) (time.Time, bool) {
		if v == "" {
			return time.Time{}, true
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			usageError(env, name, "--%s %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", flagName, v)
			return t, false
		}
		return t, true
	}
	switch sub {
	case "get":
		if len(pos) != 1 {
			return usageError(env, name, "want one KEY, got %d arguments", len(pos))
		}
		q := client.UsageQuery{Key: pos[0], Policy: policy, Limit: limit}
		var okf, okt bool
		if q.From, okf = parse("from", from); !okf {
			return ExitUsage
		}
		if q.To, okt = parse("to", to); !okt {
			return ExitUsage
		}
		c, ctx, done, err := cf.dial()
		if err != nil {
			return usageError(env, name, "%v", err)
		}
		defer done()
		h, err := c.KeyUsage(ctx, q)
		if err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, h)
			return ExitOK
		}
		tw := newTable(env.Stdout)
		fmt.Fprintln(tw, "START\tEND\tUSED\tREFUSED\t")
		for _, w := range h.Windows {
			cur := ""
			if w.Current {
				cur = "(current)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", w.Start.UTC().Format(time.RFC3339), w.End.UTC().Format(time.RFC3339), w.Used, w.Refused, cur)
		}
		_ = tw.Flush()
		limitName := "policy " + strconv.Quote(h.Policy)
		if h.Plan != "" {
			limitName = "plan " + strconv.Quote(h.Plan) + " limit " + strconv.Quote(h.Limit)
		}
		history := h.History
		if history == "" {
			history = "none"
		}
		fmt.Fprintf(env.Stdout, "%s; history %s; applied index %d\n", limitName, history, h.AppliedIndex)
		return ExitOK
	default: // export
		if len(pos) != 0 {
			return usageError(env, name, "want no arguments, got %d", len(pos))
		}
		if (policy == "") == (plan == "") {
			return usageError(env, name, "give --policy NAME or --plan NAME")
		}
		if window == "" {
			return usageError(env, name, "give --at TIME (a time inside the closed window)")
		}
		if format != "csv" && format != "jsonl" {
			return usageError(env, name, "--format %q: want csv or jsonl", format)
		}
		wt, okw := parse("at", window)
		if !okw {
			return ExitUsage
		}
		c, ctx, done, err := cf.dial()
		if err != nil {
			return usageError(env, name, "%v", err)
		}
		defer done()
		dst, closeOut, err := createOut(env, out)
		if err != nil {
			return fail(env, name, err)
		}
		_, err = c.ExportUsage(ctx, client.ExportQuery{Policy: policy, Plan: plan, PlanLimit: planLimit, Window: wt, Format: format}, dst)
		if cerr := closeOut(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(env, name, err)
		}
		return ExitOK
	}
}

// createOut is stdout for "", else a new file (never over an existing one:
// an export is a billing record).
func createOut(env Env, path string) (io.Writer, func() error, error) {
	if path == "" {
		return env.Stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

// runKeysTop is limitd keys top.
func runKeysTop(env Env, cf *connFlags, q client.TopKeysQuery, last string, pos []string) int {
	const name = "keys top"
	if len(pos) != 0 {
		return usageError(env, name, "want no arguments, got %d", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	if (q.Policy == "") == (q.Plan == "") {
		return usageError(env, name, "give --policy NAME or --plan NAME")
	}
	if q.PlanLimit != "" && q.Plan == "" {
		return usageError(env, name, "--plan-limit only with --plan")
	}
	by := q.By
	q.Limit = min(q.Limit, 32)
	switch last {
	case "5m":
		q.Window = 5 * time.Minute
	case "1h":
		q.Window = time.Hour
	default:
		return usageError(env, name, "--last %q: want 5m or 1h", last)
	}
	if by != "allowed" && by != "refused" {
		return usageError(env, name, "--by %q: want allowed or refused", by)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	v, err := c.TopKeys(ctx, q)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, v)
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "KEY\t"+strings.ToUpper(by)+"\tERROR")
	for _, k := range v.Keys {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", strconv.Quote(k.Key), k.Count, k.Error)
	}
	_ = tw.Flush()
	what := fmt.Sprintf("policy %q", v.Policy)
	if v.Plan != "" {
		what = fmt.Sprintf("plan %q", v.Plan)
		if v.PlanLimit != "" {
			what += fmt.Sprintf(", limit %q", v.PlanLimit)
		}
	}
	fmt.Fprintf(env.Stdout, "%s, the %s to %s\n", what, last, v.At.UTC().Format(time.RFC3339))
	return ExitOK
}
