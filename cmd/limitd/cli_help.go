package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// commands lists every subcommand, one line each, in the order of `limitd help`.
var commands = []struct{ name, summary string }{
	{"serve", "run a node (the default command)"},
	{"simulate", "replay a traffic trace against the algorithms"},
	{"bench", "closed-loop load against running nodes or a cluster it starts"},
	{"check", "spend from a key's budget and print the decision (exit 1 when refused)"},
	{"policy", "put, get, list or delete policies"},
	{"key", "peek at or reset a key's state"},
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

// isHelp reports a help flag given in place of a subcommand.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

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

func printUsage(env cliEnv, text string, fs *flag.FlagSet) {
	fmt.Fprint(env.stdout, text)
	fs.SetOutput(env.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// commandHelp prints a command's help to stdout; false for an unknown command.
func commandHelp(name string, env cliEnv) bool {
	switch name {
	case "serve":
		fs, _ := newServeFlagSet(env.stdout)
		fs.Usage()
	case "simulate":
		fs, _ := newSimulateFlagSet(env.stdout)
		fs.Usage()
	case "bench":
		fs, _ := newBenchFlagSet(env.stdout)
		fs.Usage()
	case "help":
		mainUsage(env.stdout)
	default:
		run, ok := clientCommands[name]
		if !ok {
			return false
		}
		run([]string{"--help"}, env)
	}
	return true
}

// clientCommands are the commands built on the client package (and version
// and snapshot), by name.
var clientCommands = map[string]func([]string, cliEnv) int{
	"check":    runCheck,
	"policy":   runPolicy,
	"key":      runKey,
	"cluster":  runCluster,
	"snapshot": runSnapshot,
	"version":  runVersion,
}

// runMain dispatches a command line (without the program name) and returns
// the exit status.
func runMain(args []string, env cliEnv) int {
	if len(args) == 0 {
		return runServe(args, env.stdout, env.stderr)
	}
	first := args[0]
	switch {
	case first == "--version" || first == "-version":
		return runVersion(args[1:], env)
	case first == "-h" || first == "-help" || first == "--help":
		mainUsage(env.stdout)
		return exitOK
	case first == "help":
		if len(args) == 1 {
			mainUsage(env.stdout)
			return exitOK
		}
		if !commandHelp(args[1], env) {
			fmt.Fprintf(env.stderr, "limitd help: unknown command %q\n\n", args[1])
			mainUsage(env.stderr)
			return exitUsage
		}
		return exitOK
	case strings.HasPrefix(first, "-"):
		// Flags only: serve, the default command.
		return runServe(args, env.stdout, env.stderr)
	}
	cmd, rest := first, args[1:]
	switch cmd {
	case "serve", "simulate", "bench":
		if hasHelpFlag(rest) {
			commandHelp(cmd, env)
			return exitOK
		}
	}
	switch cmd {
	case "serve":
		return runServe(rest, env.stdout, env.stderr)
	case "simulate":
		return runSimulate(rest, os.Stdin, env.stdout, env.stderr)
	case "bench":
		return runBench(rest, env.stdout, env.stderr)
	}
	if run, ok := clientCommands[cmd]; ok {
		return run(rest, env)
	}
	fmt.Fprintf(env.stderr, "limitd: unknown command %q\n\n", cmd)
	mainUsage(env.stderr)
	return exitUsage
}
