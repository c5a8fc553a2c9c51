// Command limitd is the limitd daemon and its tools:
//
//	limitd [serve] [flags]   run a node (the default; a fresh node bootstraps a single-node cluster)
//	limitd simulate [flags]  replay a traffic trace against the algorithms
//	limitd bench [flags]     closed-loop load against running nodes or a cluster it starts
//
// Run `limitd <command> --help` for each command's flags.
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		os.Exit(runServe(args, os.Stdout, os.Stderr))
	case "simulate":
		os.Exit(runSimulate(args, os.Stdin, os.Stdout, os.Stderr))
	case "bench":
		os.Exit(runBench(args, os.Stdout, os.Stderr))
	case "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprintf(os.Stderr, "limitd: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
}

const usage = `limitd — a replicated, durable rate limiter.

Usage:
  limitd [serve] [flags]   run a node (default). A fresh node without --join
                           bootstraps a single-node cluster in --data-dir.
  limitd simulate [flags] [TRACE]
                           replay a trace ("<seconds> <key> [<cost>]" per line)
                           against an algorithm, or all of them with --compare.
  limitd bench [flags]     closed-loop load against --addrs, or against a
                           loopback cluster it starts itself (--cluster N).

Run "limitd <command> --help" for the flags of each command.
`
