// Package testtool is how a test says it needs something from outside the
// module: an executable (chromium, nginx, haproxy, redis-server, openssl,
// systemd-analyze), the Kubernetes schema validator, a tmpfs mount. Where
// the need is not met the test is skipped on a developer's machine, and
// fails when the CI environment variable is set, so that a broken install
// step in .ci/run cannot quietly shrink what CI tests.
package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// InCI reports whether the tests run in CI: the CI environment variable is
// set to anything but "", "0" or "false" (CI services set CI=true).
func InCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}

// Path returns the path of the executable name. Where it is not installed
// the test is skipped, or fails under CI; install says how to install it.
func Path(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s is not installed (%s): %v", name, install, err)
		return "" // reached only by a testing.TB whose Skip returns
	}
	return p
}

// Missing ends the test for want of what the message names: a skip, or a
// failure under CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s; CI=%s requires it (see .ci/run)", msg, os.Getenv("CI"))
		return
	}
	t.Skip(msg)
}
