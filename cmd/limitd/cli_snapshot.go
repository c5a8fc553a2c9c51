package main

import "flag"

const snapshotUsage = `Usage: limitd snapshot save|restore|inspect

(save, restore and inspect are being added)
`

func runSnapshot(args []string, env cliEnv) int {
	if len(args) > 0 && isHelp(args[0]) {
		printUsage(env, snapshotUsage, flag.NewFlagSet("snapshot", flag.ContinueOnError))
		return exitOK
	}
	return usageError(env, "snapshot", "not implemented yet")
}
