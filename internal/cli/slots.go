package cli

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/limitd/limitd/client"
)

const slotUsage = `Usage: limitd slot release|renew [flags] --slot ID KEY

A concurrency limit's slot, as an allowed "limitd check" under it printed
(slot): under --policy NAME or the same inline limit (--algorithm
concurrency --limit N --hold 30s).

  release  free the slot now; "released false" when it was freed already
  renew    extend its hold by the limit's hold (up to max_hold); exit 1 when
           it was freed already (the slot is lost)

Example:
  limitd check --policy workers job:42
  limitd slot renew --policy workers --slot 5.0.0 job:42
  limitd slot release --policy workers --slot 5.0.0 job:42

Flags:
`

func runSlot(args []string, env Env) int {
	newFlags := func() (*flag.FlagSet, *connFlags, *limitFlags, *string) {
		fs := flag.NewFlagSet("slot", flag.ContinueOnError)
		var cf connFlags
		var lf limitFlags
		slot := fs.String("slot", "", "the slot's id, from the acquiring check's answer (required)")
		lf.register(fs)
		cf.register(fs)
		return fs, &cf, &lf, slot
	}
	if len(args) == 0 || (args[0] != "release" && args[0] != "renew") {
		if len(args) > 0 && isHelp(args[0]) {
			fs, _, _, _ := newFlags()
			printUsage(env, slotUsage, fs)
			return ExitOK
		}
		return usageError(env, "slot", "want a subcommand: release or renew")
	}
	sub, name := args[0], "slot "+args[0]
	fs, cf, lf, slot := newFlags()
	pos, code, ok := parseFlags(fs, args[1:], env, func() { printUsage(env, slotUsage, fs) })
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(env, name, "want exactly one KEY, got %d arguments", len(pos))
	}
	if *slot == "" {
		return usageError(env, name, "--slot is required")
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
	req := client.Request{Key: pos[0], Policy: policy, Limit: lim}
	var st client.SlotStatus
	if sub == "renew" {
		st, err = c.Renew(ctx, req, *slot)
		if errors.Is(err, client.ErrSlotLost) {
			err = nil // freed already: reported below, exit 1
		}
	} else {
		st, err = c.Release(ctx, req, *slot)
	}
	if err != nil {
		return fail(env, name, err)
	}
	field := map[string]string{"release": "released", "renew": "renewed"}[sub]
	left := time.Duration(0)
	if !st.Expires.IsZero() {
		left = time.Until(st.Expires).Round(time.Millisecond)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, map[string]any{"key": pos[0], "slot": *slot, field: st.Done, "slot_expires_ms": left.Milliseconds(), "remaining": st.Remaining})
	} else {
		tw := newTable(env.Stdout)
		fmt.Fprintf(tw, "key\t%s\nslot\t%s\n%s\t%v\n", pos[0], *slot, field, st.Done)
		if st.Done && sub == "renew" {
			fmt.Fprintf(tw, "slot_expires\t%s\n", left)
		}
		fmt.Fprintf(tw, "remaining\t%d\n", st.Remaining)
		tw.Flush()
	}
	if sub == "renew" && !st.Done {
		return ExitRefused
	}
	return ExitOK
}
