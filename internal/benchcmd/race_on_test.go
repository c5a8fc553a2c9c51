//go:build race

package benchcmd

// raceEnabled: this test binary runs under the race detector, and so do the
// nodes it starts as itself (TestMain).
const raceEnabled = true
