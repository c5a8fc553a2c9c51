package cli

import (
	"flag"
	"fmt"

	"github.com/limitd/limitd/client"
)

const checkUsage = `Usage: limitd check [flags] KEY

Spends --cost (default 1) of KEY's budget under --policy NAME, or under an
inline limit (--algorithm, --limit, --window, …), and prints the decision.
Exit status: 0 allowed, 1 refused, 2 usage or invalid input, 3 unavailable,
4 other errors (e.g. unknown policy).

Example:
  limitd check --policy api user:42
  limitd check --algorithm token_bucket --limit 10 --window 1s ip:203.0.113.9

Flags:
`

func runCheck(args []string, env Env) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var cf connFlags
	var lf limitFlags
	cost := fs.Int64("cost", 1, "how much to spend (0 is a peek)")
	requestID := fs.String("request-id", "", "idempotency id: a repeat returns the first decision (default: generated)")
	lf.register(fs)
	cf.register(fs)
	pos, code, ok := parseFlags(fs, args, env, func() { printUsage(env, checkUsage, fs) })
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(env, "check", "want exactly one KEY, got %d arguments", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, "check", "%v", err)
	}
	policy, lim, err := lf.resolve()
	if err != nil {
		return usageError(env, "check", "%v", err)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, "check", "%v", err)
	}
	defer done()
	req := client.Request{Key: pos[0], Policy: policy, Limit: lim, Cost: *cost, RequestID: *requestID}
	var d client.Decision
	if *cost == 0 {
		d, err = c.Peek(ctx, pos[0], policy, lim)
	} else {
		d, err = c.Check(ctx, req)
	}
	if err != nil {
		return fail(env, "check", err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, toDecisionJSON(d))
	} else {
		printDecision(env.Stdout, pos[0], d)
	}
	if !d.Allowed {
		return ExitRefused
	}
	return ExitOK
}

const keyUsage = `Usage: limitd key peek|reset [flags] KEY

  peek   show KEY's state under --policy NAME (or an inline limit) without
         spending anything; "allowed" says whether a request of cost 1 would be
  reset  forget KEY's state under that limit (admin: --token)

Example:
  limitd key peek --policy api user:42
  limitd key reset --policy api user:42

Flags:
`

func runKey(args []string, env Env) int {
	if len(args) == 0 || (args[0] != "peek" && args[0] != "reset") {
		if len(args) > 0 && isHelp(args[0]) {
			fs := flag.NewFlagSet("key", flag.ContinueOnError)
			var cf connFlags
			var lf limitFlags
			lf.register(fs)
			cf.register(fs)
			printUsage(env, keyUsage, fs)
			return ExitOK
		}
		return usageError(env, "key", "want a subcommand: peek or reset")
	}
	sub := args[0]
	name := "key " + sub
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	var cf connFlags
	var lf limitFlags
	lf.register(fs)
	cf.register(fs)
	pos, code, ok := parseFlags(fs, args[1:], env, func() { printUsage(env, keyUsage, fs) })
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(env, name, "want exactly one KEY, got %d arguments", len(pos))
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	policy, lim, err := lf.resolve()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	if sub == "reset" {
		if err := c.Reset(ctx, pos[0], policy, lim); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]any{"key": pos[0], "reset": true})
		} else {
			fmt.Fprintf(env.Stdout, "key %q reset\n", pos[0])
		}
		return ExitOK
	}
	d, err := c.Peek(ctx, pos[0], policy, lim)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, toDecisionJSON(d))
	} else {
		printDecision(env.Stdout, pos[0], d)
	}
	return ExitOK
}
