package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/limitd/limitd/client"
)

const settleUsage = `Usage: limitd settle --reservation TOKEN --cost N

Settles a reservation (the "reservation" of a check with reserve) at its
actual cost: the difference comes back to the key, or the extra is charged
(it always applies, and may put the key in debt). Exactly once: the same
settle again prints replayed true; another cost, or a settle after the
hold ended, is an error naming the field.

Example:
  limitd settle --reservation r1.cAZ0b2tlbnMG... --cost 25

Flags:
`

const refundUsage = `Usage: limitd refund --request-id ID --cost N

Gives back up to N units of what the check sent with request_id ID spent,
in the window it spent them: after that window rolled nothing comes back
(rolled true, exit 1). At most what the request spent and has not been
refunded.

Example:
  limitd check --policy tokens --cost 30 --request-id job-1 user:1
  limitd refund --request-id job-1 --cost 20

Flags:
`

func runSettle(args []string, env Env) int {
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	var cf connFlags
	rsv := fs.String("reservation", "", "the reservation token a check with reserve answered (required)")
	cost := fs.Int64("cost", -1, "the actual cost (required; 0 or more)")
	cf.register(fs)
	return runCost(fs, &cf, args, env, "settle", settleUsage, func() error {
		if *rsv == "" {
			return fmt.Errorf("--reservation is required")
		}
		if *cost < 0 {
			return fmt.Errorf("--cost is required: the actual cost, 0 or more")
		}
		return nil
	}, func(c *client.Client, cctx context.Context) (client.Settled, error) {
		return c.Settle(cctx, *rsv, *cost)
	})
}

func runRefund(args []string, env Env) int {
	fs := flag.NewFlagSet("refund", flag.ContinueOnError)
	var cf connFlags
	id := fs.String("request-id", "", "the request_id of the check whose units to give back (required)")
	cost := fs.Int64("cost", 0, "the units to give back (required; at least 1)")
	cf.register(fs)
	return runCost(fs, &cf, args, env, "refund", refundUsage, func() error {
		if *id == "" {
			return fmt.Errorf("--request-id is required")
		}
		if *cost <= 0 {
			return fmt.Errorf("--cost is required: at least 1")
		}
		return nil
	}, func(c *client.Client, cctx context.Context) (client.Settled, error) {
		return c.Refund(cctx, *id, *cost)
	})
}

func runCost(fs *flag.FlagSet, cf *connFlags, args []string, env Env, name, usage string, check func() error,
	op func(*client.Client, context.Context) (client.Settled, error)) int {
	pos, code, ok := parseFlags(fs, args, env, func() { printUsage(env, usage, fs) })
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return usageError(env, name, "takes no arguments, got %d", len(pos))
	}
	if err := check(); err != nil {
		return usageError(env, name, "%v", err)
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	st, err := op(c, ctx)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.output == "json" {
		printJSON(env.Stdout, map[string]any{"credited": st.Credited, "debt": st.Debt, "rolled": st.Rolled, "remaining": st.Remaining, "replayed": st.Replayed})
	} else {
		tw := newTable(env.Stdout)
		fmt.Fprintf(tw, "credited\t%d\ndebt\t%d\nrolled\t%v\nremaining\t%d\n", st.Credited, st.Debt, st.Rolled, st.Remaining)
		if st.Replayed {
			fmt.Fprintf(tw, "replayed\ttrue\n")
		}
		tw.Flush()
	}
	if name == "refund" && st.Rolled && st.Credited == 0 {
		return ExitRefused // nothing came back
	}
	return ExitOK
}
