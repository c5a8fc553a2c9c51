package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/limitd/limitd/client"
)

const eventsUsage = `Usage: limitd events [--after ID] [--count N] [flags]

  Streams the alert events (a limit's notify thresholds crossed, bans) the
  node applies (admin; GET /v1/events), one line each, until interrupted
  or --count events: table "ID TYPE BODY", or with --output json one
  object {"id","type","data"} a line. --after ID first prints the events
  after ID still in the node's outbox (resume from the last ID printed).

Example:
  limitd events --token "$TOKEN"
  limitd events --after 1769000000000000 --count 10 --output json

Flags:
`

// errEnough ends the watch after --count events.
var errEnough = errors.New("enough events")

func runEvents(args []string, env Env) int {
	var cf connFlags
	var after uint64
	var count int
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.Uint64Var(&after, "after", 0, "first the events after this id still in the outbox")
	fs.IntVar(&count, "count", 0, "stop after this many events (0: until interrupted)")
	cf.register(fs)
	pos, code, ok := parseFlags(fs, args, env, func() { printUsage(env, eventsUsage, fs) })
	if !ok {
		return code
	}
	if err := cf.validate(env); err != nil {
		return usageError(env, "events", "%v", err)
	}
	if len(pos) != 0 {
		return usageError(env, "events", "want no arguments, got %d", len(pos))
	}
	if count < 0 {
		return usageError(env, "events", "--count must not be negative")
	}
	c, err := cf.newClient()
	if err != nil {
		return usageError(env, "events", "%v", err)
	}
	defer c.Close()
	// A stream has no deadline: --timeout would end it. An interrupt ends
	// it cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	n := 0
	err = c.WatchEvents(ctx, after, func(ev client.Event) error {
		if cf.output == "json" {
			b, _ := json.Marshal(struct {
				ID   uint64          `json:"id"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}{ev.ID, ev.Type, ev.Data})
			fmt.Fprintf(env.Stdout, "%s\n", b)
		} else {
			fmt.Fprintf(env.Stdout, "%d\t%s\t%s\n", ev.ID, ev.Type, ev.Data)
		}
		if n++; count > 0 && n >= count {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return fail(env, "events", err)
	}
	return ExitOK
}
