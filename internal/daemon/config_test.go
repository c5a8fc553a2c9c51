package daemon

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
	"github.com/limitd/limitd/service"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "limitd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// Precedence: command-line flag > LIMITD_* environment > --config file >
// default, for every combination of the three sources over settings of
// each kind (string, duration, int, bool, list).
func TestServeConfigPrecedence(t *testing.T) {
	type setting struct {
		name                    string
		flagV, envV, fileV, def string
		get                     func(*serveFlags) string
	}
	settings := []setting{
		{"http-addr", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", DefaultHTTPAddr, func(f *serveFlags) string { return f.httpAddr }},
		{"batch-max-wait", "1ms", "2ms", "3ms", "0s", func(f *serveFlags) string { return f.batchMaxWait.String() }},
		{"batch-max-ops", "11", "12", "13", fmt.Sprint(cluster.DefaultBatchMaxOps), func(f *serveFlags) string { return fmt.Sprint(f.batchMaxOps) }},
		{"pprof", "true", "false", "true", "false", func(f *serveFlags) string { return fmt.Sprint(f.pprof) }},
		{"join", "a:1,b:1", "c:1", "d:1", "", func(f *serveFlags) string { return f.join.String() }},
	}
	for mask := 0; mask < 8; mask++ {
		useFlag, useEnv, useFile := mask&1 != 0, mask&2 != 0, mask&4 != 0
		t.Run(fmt.Sprintf("flag=%v,env=%v,file=%v", useFlag, useEnv, useFile), func(t *testing.T) {
			var args []string
			env := map[string]string{}
			var file strings.Builder
			for _, s := range settings {
				if useFlag {
					args = append(args, "--"+s.name+"="+s.flagV)
				}
				if useEnv {
					env[envName(s.name)] = s.envV
				}
				if useFile {
					fmt.Fprintf(&file, "%s: %q\n", s.name, s.fileV)
				}
			}
			if useFile {
				args = append(args, "--config", writeConfig(t, file.String()))
			}
			f, err := loadServeFlags(args, envOf(env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range settings {
				want := s.def
				switch {
				case useFlag:
					want = s.flagV
				case useEnv:
					want = s.envV
				case useFile:
					want = s.fileV
				}
				if got := s.get(f); got != want {
					t.Errorf("%s = %q, want %q", s.name, got, want)
				}
			}
		})
	}
}

// The file may name --config through LIMITD_CONFIG, lists join as a YAML
// list, and every flag of limitd serve is a valid key.
func TestServeConfigFileKeys(t *testing.T) {
	p := writeConfig(t, "join:\n  - http://10.0.0.1:8080\n  - 10.0.0.2:8080,10.0.0.3:8080\napply-timeout: 2s\nlog-format: json\n")
	f, err := loadServeFlags(nil, envOf(map[string]string{"LIMITD_CONFIG": p}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}; !reflect.DeepEqual([]string(f.join), want) {
		t.Errorf("join = %q, want %q", f.join, want)
	}
	if f.applyTimeout != 2*time.Second || f.logFormat != "json" {
		t.Errorf("apply-timeout %v log-format %q", f.applyTimeout, f.logFormat)
	}
	// Every flag is accepted as a key (with its own default as the value).
	fs, _ := newServeFlagSet(&bytes.Buffer{})
	var all strings.Builder
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "config" {
			fmt.Fprintf(&all, "%s: %q\n", fl.Name, fl.DefValue)
		}
	})
	if _, err := loadServeFlags([]string{"--config", writeConfig(t, all.String())}, envOf(nil), &bytes.Buffer{}); err != nil {
		t.Fatalf("a file of every flag at its default: %v", err)
	}
}

// A strict file: errors name the key and its line.
func TestServeConfigFileErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"http-addr: 127.0.0.1:1\nhttp_adr: x\n", `:2: "http_adr": unknown key`},
		{"config: other.yaml\n", `:1: "config": unknown key`},
		{"data-dir: a\ndata-dir: b\n", `data-dir`},
		{"\n\nbatch-max-wait: soon\n", `:3: "batch-max-wait": invalid duration "soon"`},
		{"pprof:\n", `:1: "pprof": no value`},
		{"http-addr: [a, b]\n", `:1: "http-addr": line 1: want a plain value`},
		{"join:\n  - {a: b}\n", `"join": line 2: list items must be plain values`},
		{"- http-addr\n", `must be a mapping`},
	} {
		_, err := loadServeFlags([]string{"--config", writeConfig(t, c.body)}, envOf(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("file %q: error %v, want one containing %q", c.body, err, c.want)
		}
	}
	if _, err := loadServeFlags([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, envOf(nil), &bytes.Buffer{}); err == nil {
		t.Error("a missing --config file was accepted")
	}
	_, err := loadServeFlags(nil, envOf(map[string]string{"LIMITD_BATCH_MAX_OPS": "many"}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "LIMITD_BATCH_MAX_OPS") {
		t.Errorf("bad environment value: %v, want an error naming the variable", err)
	}
	if _, err := loadServeFlags([]string{"--nope"}, envOf(nil), &bytes.Buffer{}); !errors.As(err, new(*flagsError)) {
		t.Errorf("unknown flag: %v", err)
	}
}

// One source for every default: each serve flag's default is the exported
// constant of the package that owns the setting, and --help shows it.
func TestServeFlagDefaultsAreTheConstants(t *testing.T) {
	var help bytes.Buffer
	fs, _ := newServeFlagSet(&help)
	want := map[string]any{
		"http-addr": DefaultHTTPAddr, "raft-addr": DefaultRaftAddr, "data-dir": DefaultDataDir,
		"auth-key-source": api.DefaultAuthKeySource, "max-batch": service.DefaultMaxBatch,
		"batch-max-ops": cluster.DefaultBatchMaxOps, "batch-inflight": cluster.DefaultBatchInflight,
		"fsm-commit-every": cluster.DefaultFSMCommitEvery, "fsm-flush-interval": cluster.DefaultFSMFlushInterval,
		"request-id-retention": cluster.DefaultRequestIDRetention, "apply-timeout": cluster.DefaultApplyTimeout,
		"snapshot-threshold": cluster.DefaultSnapshotThreshold, "snapshot-interval": cluster.DefaultSnapshotInterval,
		"trailing-logs": cluster.DefaultTrailingLogs, "log-level": DefaultLogLevel, "log-format": DefaultLogFormat,
		"gc-percent": DefaultGCPercent, "memory-limit-mib": DefaultMemoryLimitMiB,
		"read-timeout": DefaultReadTimeout, "idle-timeout": DefaultIdleTimeout, "max-connections": DefaultMaxConnections,
		"join-timeout": cluster.DefaultJoinTimeout, "fsm-cache-keys": persist.DefaultCacheKeys,
		"overlimit-cache-entries": overlimit.DefaultMaxEntries,
	}
	for name, v := range want {
		fl := fs.Lookup(name)
		if fl == nil {
			t.Errorf("no flag --%s", name)
			continue
		}
		if got := fmt.Sprint(v); fl.DefValue != got {
			t.Errorf("--%s default %q, want the constant %q", name, fl.DefValue, got)
		}
	}
	// The request deadline has one default across cluster and service.
	if service.DefaultRequestTimeout != cluster.DefaultApplyTimeout {
		t.Errorf("service.DefaultRequestTimeout %v != cluster.DefaultApplyTimeout %v", service.DefaultRequestTimeout, cluster.DefaultApplyTimeout)
	}
	fs.Usage()
	for _, s := range []string{"(default 2048)", "(default 5s)", `(default "ip")`, "LIMITD_DATA_DIR", "--config"} {
		if !strings.Contains(help.String(), s) {
			t.Errorf("--help does not show %s", s)
		}
	}
	if strings.Contains(help.String(), "see docs/API.md") {
		t.Error("--help still points to docs/API.md for the --auth-key-source default")
	}
}

// A bad flag is one line naming it, with a suggestion when it is close to a
// real one and where the flags are listed; not the 120 lines of usage.
func TestServeBadFlagIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--bogus"}, nil, "limitd: serve: unknown flag --bogus; run 'limitd serve --help' for the flags\n"},
		{[]string{"--data-dri", "/x"}, nil, "limitd: serve: unknown flag --data-dri (did you mean --data-dir?); run 'limitd serve --help' for the flags\n"},
		{[]string{"--apply-timeout", "60"}, nil, `limitd: serve: invalid duration "60" for --apply-timeout (want e.g. 60s, 1h30m or 500ms); run 'limitd serve --help' for the flags` + "\n"},
		{nil, map[string]string{"LIMITD_APPLY_TIMEOUT": "60"}, `limitd: LIMITD_APPLY_TIMEOUT: invalid duration "60" (want e.g. 60s, 1h30m or 500ms)` + "\n"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out bytes.Buffer
		if code := Main(tc.args, &out); code != 2 || out.String() != tc.want {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant exit 2 and:\n%s", tc.args, tc.env, code, out.String(), tc.want)
		}
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
}
