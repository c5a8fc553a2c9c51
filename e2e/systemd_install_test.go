package e2e

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The unit's install steps (its header) place every file the unit and the
// environment template name: the binary, the environment file, and each
// absolute path a LIMITD_ variable of limitd.env gives (the TLS files), the
// private key readable by the limitd group only. A template naming a file
// the steps never install starts a node that fails on its first read.
func TestSystemdInstallStepsPlaceEveryFile(t *testing.T) {
	unit := readDeploy(t, "systemd/limitd.service")
	installed := map[string]string{} // destination → the install line
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(line, "#"))
		for _, cmd := range strings.Split(line, "&&") {
			f := strings.Fields(cmd)
			if len(f) < 3 || f[0] != "install" || slices.Contains(f, "-d") {
				continue
			}
			installed[f[len(f)-1]] = strings.TrimSpace(cmd)
		}
	}
	var want []string
	for _, re := range []string{`(?m)^EnvironmentFile=(\S+)`, `(?m)^ExecStart=(\S+)`} {
		m := regexp.MustCompile(re).FindStringSubmatch(unit)
		if m == nil {
			t.Fatalf("limitd.service has no %s", re)
		}
		want = append(want, m[1])
	}
	env := readDeploy(t, "systemd/limitd.env")
	for _, m := range regexp.MustCompile(`(?m)^(LIMITD_\w+)=(/\S+)$`).FindAllStringSubmatch(env, -1) {
		want = append(want, m[2])
	}
	if len(want) < 5 { // the unit's two, and the template's three TLS files at least
		t.Fatalf("found only %v to check", want)
	}
	for _, p := range want {
		if _, ok := installed[p]; !ok {
			t.Errorf("%s is named by the unit or limitd.env but no install step in limitd.service's header places it", p)
		}
	}
	keyRe := regexp.MustCompile(`(?m)^LIMITD_TLS_KEY=(\S+)$`)
	if m := keyRe.FindStringSubmatch(env); m == nil {
		t.Error("limitd.env names no LIMITD_TLS_KEY")
	} else if line := installed[m[1]]; line != "" && (!strings.Contains(line, "-m 0640") || !strings.Contains(line, "-g limitd")) {
		t.Errorf("the private key's step %q: want -m 0640 -g limitd (readable by the service, not by everyone)", line)
	}
}
