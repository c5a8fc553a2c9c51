// Package benchcmd is `limitd bench`: its flags, the cluster it may start
// (--cluster N: limitd processes on loopback, through internal/proccluster),
// the policy or RLS domain it creates, the CPU and latency-stage figures it
// collects from the nodes, and the run itself, done by package bench.
//
// It is apart from package bench, which scripts/redisbench shares and which
// speaks only public APIs, so that the Redis driver links none of limitd's
// process machinery; and apart from package cli, which holds the operator's
// commands against a running cluster, not load generation.
package benchcmd
