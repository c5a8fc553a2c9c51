//go:build !race

package benchcmd

// raceEnabled: see race_on_test.go.
const raceEnabled = false
