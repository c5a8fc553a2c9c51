package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// One port plan in every doc a reader copies from (README.md's "Ports"): a
// node's HTTP on 8080, gRPC on 8081, Raft on 8300, node k of one machine on
// 8k80, 8k81 and 830k. A loopback or wildcard address with any other port
// is one of the few that are not a limitd node's (each listed below with
// what it is) or a doc that drifted from the plan (the CLI block once
// targeted 127.0.0.1:19081, a cluster the README never started).
// docs/BENCHMARKS.md is left out: it records the ports of the runs it
// reports.
func TestDocsFollowThePortPlan(t *testing.T) {
	plan := map[int]bool{8080: true, 8081: true, 8300: true}
	for k := 1; k <= 9; k++ {
		plan[8000+100*k+80], plan[8000+100*k+81], plan[8300+k] = true, true, true
	}
	notLimitd := map[int]string{
		3000:  "the application behind nginx or HAProxy (docs/API.md)",
		4318:  "an OTLP collector (docs/OPERATIONS.md, Tracing)",
		16686: "Jaeger's UI (docs/OPERATIONS.md, Tracing)",
		18000: "an xDS management server (docs/ENVOY.md, examples/xds-server)",
		99999: "an invalid Raft address, refused (docs/API.md)",
	}
	docs := []string{"README.md", "clients/python/README.md", "clients/node/README.md"}
	for _, glob := range []string{"docs/*.md", "deploy/*/*", "examples/*/*.md"} {
		m, err := filepath.Glob(filepath.Join("..", glob))
		must(t, err)
		for _, p := range m {
			docs = append(docs, strings.TrimPrefix(p, "../"))
		}
	}
	// A port may be node k's, in prose (8k81) or a shell template (README:
	// 8${2}80, 830$2).
	addr := regexp.MustCompile(`(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d+(?:(?:\$\{?\d\}?|k)\d*)?)`)
	kVar := regexp.MustCompile(`\$\{?\d\}?|k`)
	checked := 0
	for _, doc := range docs {
		if doc == "docs/BENCHMARKS.md" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", doc))
		must(t, err)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range addr.FindAllStringSubmatch(line, -1) {
				checked++
				onPlan := true
				if kVar.MatchString(m[1]) {
					for k := 1; k <= 9; k++ {
						port, _ := strconv.Atoi(kVar.ReplaceAllString(m[1], strconv.Itoa(k)))
						onPlan = onPlan && plan[port]
					}
				} else {
					port, _ := strconv.Atoi(m[1])
					onPlan = plan[port] || notLimitd[port] != ""
				}
				if !onPlan {
					t.Errorf("%s:%d: %s is not on the port plan (HTTP 8080, gRPC 8081, Raft 8300; node k: 8k80, 8k81, 830k): %s", doc, i+1, m[0], strings.TrimSpace(line))
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d addresses found: the docs moved?", checked)
	}
}
