package main

import (
	"fmt"
	"io"

	"github.com/limitd/limitd/internal/benchcmd"
	"github.com/limitd/limitd/internal/cli"
	"github.com/limitd/limitd/internal/daemon"
)

// commands lists every subcommand, one line each, in the order of `limitd help`.
var commands = []struct{ name, summary string }{
	{"serve", "run a node (the default command)"},
	{"simulate", "replay a traffic trace against the algorithms"},
	{"bench", "closed-loop load against running nodes or a cluster it starts"},
	{"check", "spend from a key's budget and print the decision (exit 1 when refused)"},
	{"policy", "put, get, list or delete policies"},
	{"plan", "put, get, list or delete plans; assign keys; set the default plan"},
	{"key", "peek at or reset a key's state"},
	{"list", "put, get, ls or delete allow and deny lists"},
	{"bans", "list the banned keys, or lift a ban"},
	{"webhook", "put, get, list or delete the webhooks that receive alert and ban events"},
	{"events", "stream the alert and ban events a node applies"},
	{"keys", "list the keys of a policy or plan limit with their usage"},
	{"usage", "a key's usage per window, or export a closed window for billing"},
	{"slot", "release or renew a concurrency limit's slot"},
	{"settle", "settle a reservation at its actual cost"},
	{"refund", "give back units a request id's check spent"},
	{"cluster", "status, members, join or remove nodes"},
	{"snapshot", "save a backup of a running cluster, restore it into a data dir, inspect a file"},
	{"version", "print the version, VCS revision and build time"},
	{"help", "show this list, or a command's help: limitd help COMMAND"},
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `limitd — a replicated, durable rate limiter.

Usage:
  limitd [serve] [flags]        run a node (default); a fresh node without
                                --join bootstraps a single-node cluster
  limitd COMMAND [args] [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
The client commands (check, policy, key, cluster, snapshot save) take
--addr (or LIMITD_ADDR), --token (or LIMITD_ADMIN_TOKEN), TLS flags and
--output table|json.

Exit status: 0 ok; 1 refused (check); 2 usage or invalid input (a bad
flag); 3 unavailable (no leader, unreachable, timeout: retried until
--timeout); 4 other errors (not found, conflict, a damaged file);
5 configuration (a certificate --tls-ca does not trust or not valid for
--addr, HTTP vs HTTPS, an unknown host, a missing or refused --token):
not retried, and the message names the flag to fix.

Run "limitd help COMMAND" for a command's flags.
`)
}

// hasHelpFlag reports -h/--help among args (before a "--").
func hasHelpFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// commandHelp prints a command's help to stdout; false for an unknown command.
func commandHelp(name string, env cli.Env) bool {
	switch name {
	case "serve":
		daemon.FlagSet(env.Stdout).Usage()
	case "simulate":
		cli.SimulateUsage(env.Stdout)
	case "bench":
		benchcmd.Usage(env.Stdout)
	case "help":
		mainUsage(env.Stdout)
	default:
		_, ok := cli.Run(name, []string{"--help"}, env)
		return ok
	}
	return true
}
