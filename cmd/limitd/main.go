// Command limitd is the limitd daemon, its tools and its operator's CLI:
//
//	limitd [serve] [flags]      run a node (the default; a fresh node bootstraps a single-node cluster)
//	limitd simulate [flags]     replay a traffic trace against the algorithms
//	limitd bench [flags]        closed-loop load against running nodes or a cluster it starts
//	limitd check KEY            spend from a key's budget (exit 1 when refused)
//	limitd policy …             put, get, list, delete policies
//	limitd plan …               put, get, list, delete plans; assign keys; the default plan
//	limitd key peek|reset KEY   look at or reset a key
//	limitd keys list            the keys of a policy or plan limit with their usage
//	limitd usage get|export     a key's usage per window; a closed window's export
//	limitd cluster …            status, members, join, remove
//	limitd snapshot …           save, restore, inspect backups
//	limitd version              version, VCS revision and build time
//
// Run `limitd help` for the list and `limitd help <command>` for each
// command's flags. Exit status: 0 ok, 1 refused (check), 2 usage, 3
// unavailable, 4 other errors.
//
// This package only dispatches: serve is internal/daemon, bench is
// internal/benchcmd, and the other commands are internal/cli.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/limitd/limitd/internal/benchcmd"
	"github.com/limitd/limitd/internal/cli"
	"github.com/limitd/limitd/internal/daemon"
)

func main() {
	os.Exit(runMain(os.Args[1:], cli.OSEnv()))
}

// runMain dispatches a command line (without the program name) and returns
// the exit status.
func runMain(args []string, env cli.Env) int {
	if len(args) == 0 {
		return daemon.Main(args, env.Stderr)
	}
	first := args[0]
	switch {
	case first == "--version" || first == "-version":
		code, _ := cli.Run("version", args[1:], env)
		return code
	case first == "-h" || first == "-help" || first == "--help":
		mainUsage(env.Stdout)
		return cli.ExitOK
	case first == "help":
		if len(args) == 1 {
			mainUsage(env.Stdout)
			return cli.ExitOK
		}
		if !commandHelp(args[1], env) {
			fmt.Fprintf(env.Stderr, "limitd help: unknown command %q\n\n", args[1])
			mainUsage(env.Stderr)
			return cli.ExitUsage
		}
		return cli.ExitOK
	case strings.HasPrefix(first, "-"):
		// Flags only: serve, the default command.
		return daemon.Main(args, env.Stderr)
	}
	cmd, rest := first, args[1:]
	switch cmd {
	case "serve", "simulate", "bench":
		if hasHelpFlag(rest) {
			commandHelp(cmd, env)
			return cli.ExitOK
		}
	}
	switch cmd {
	case "serve":
		return daemon.Main(rest, env.Stderr)
	case "simulate":
		return cli.Simulate(rest, os.Stdin, env.Stdout, env.Stderr)
	case "bench":
		return benchcmd.Main(rest, env.Stdout, env.Stderr)
	}
	if code, ok := cli.Run(cmd, rest, env); ok {
		return code
	}
	fmt.Fprintf(env.Stderr, "limitd: unknown command %q\n\n", cmd)
	mainUsage(env.Stderr)
	return cli.ExitUsage
}
