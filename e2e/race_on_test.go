//go:build race

package e2e

// raceEnabled: this test binary runs under the race detector, so the limitd
// binary the process tests start is built with it too (TestMain).
const raceEnabled = true
