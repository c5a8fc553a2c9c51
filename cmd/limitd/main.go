// Command limitd is the limitd daemon, its tools and its operator's CLI:
//
//	limitd [serve] [flags]      run a node (the default; a fresh node bootstraps a single-node cluster)
//	limitd simulate [flags]     replay a traffic trace against the algorithms
//	limitd bench [flags]        closed-loop load against running nodes or a cluster it starts
//	limitd check KEY            spend from a key's budget (exit 1 when refused)
//	limitd policy …             put, get, list, delete policies
//	limitd key peek|reset KEY   look at or reset a key
//	limitd cluster …            status, members, join, remove
//	limitd snapshot …           save, restore, inspect backups
//	limitd version              version, VCS revision and build time
//
// Run `limitd help` for the list and `limitd help <command>` for each
// command's flags. Exit status: 0 ok, 1 refused (check), 2 usage, 3
// unavailable, 4 other errors.
package main

import "os"

func main() {
	os.Exit(runMain(os.Args[1:], osEnv()))
}
