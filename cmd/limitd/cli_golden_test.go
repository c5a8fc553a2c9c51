package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/limitd/limitd/buildinfo"
	"github.com/limitd/limitd/internal/cli"
)

var updateGolden = flag.Bool("update", false, "rewrite the CLI golden files in testdata/cli")

// goldenCase is one command line, run in-process.
type goldenCase struct {
	name string
	args []string
}

// TestMainGolden runs the binary's own command lines (help, an unknown
// command, version with a fixed build) through the dispatch and compares
// stdout, stderr and the exit status with testdata/cli/NAME.golden; the
// client commands against a node are e2e's TestCLIGolden. Run with -update
// to rewrite the files.
func TestMainGolden(t *testing.T) {
	old := buildinfo.Read
	buildinfo.Read = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99.0", Main: debug.Module{Path: "github.com/limitd/limitd", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "false"}}}, true
	}
	defer func() { buildinfo.Read = old }()

	cases := []goldenCase{
		{"help", []string{"help"}},
		{"help-flag", []string{"--help"}},
		{"help-check", []string{"help", "check"}},
		{"help-unknown", []string{"help", "nope"}},
		{"unknown-command", []string{"frobnicate"}},
		{"version", []string{"version"}},
		{"version-flag-json", []string{"--version", "--output", "json"}},
	}
	masks := []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`(reset_after +)\S+`), "${1}DURATION"},
		{regexp.MustCompile(`("reset_after_ms": )\d+`), "${1}MS"},
		{regexp.MustCompile(`(retry_after +)[1-9]\S*`), "${1}DURATION"},
		{regexp.MustCompile(`("retry_after_ms": )[1-9]\d*`), "${1}MS"},
		{regexp.MustCompile(`(?m)^((term|commit index|applied index) +)\d+$`), "${1}N"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		env := cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			return ""
		}}
		code := runMain(tc.args, env)
		got := fmt.Sprintf("$ limitd %s\nexit: %d\n--- stdout\n%s--- stderr\n%s", strings.Join(tc.args, " "), code, stdout.String(), stderr.String())
		for _, m := range masks {
			got = m.re.ReplaceAllString(got, m.with)
		}
		path := filepath.Join("testdata", "cli", tc.name+".golden")
		if *updateGolden {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to create it)", tc.name, err)
		}
		if got != string(want) {
			t.Errorf("%s: output differs from %s (run with -update after checking the change):\n--- got\n%s\n--- want\n%s", tc.name, path, got, want)
		}
	}
}

// Help goes to stdout with status 0 for every command, including the
// daemon's own (serve, simulate, bench), and lists every subcommand.
func TestCLIHelpToStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		var stdout, stderr bytes.Buffer
		if code := runMain(args, cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != 0 || stderr.Len() != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
		for _, c := range []string{"serve", "simulate", "bench", "check", "policy", "key", "cluster", "snapshot", "version"} {
			if !regexp.MustCompile(`(?m)^  ` + c + ` +\S`).MatchString(stdout.String()) {
				t.Errorf("%v: no line for %s:\n%s", args, c, stdout.String())
			}
		}
	}
	for _, c := range []string{"serve", "simulate", "bench", "check", "policy", "key", "cluster", "snapshot", "version"} {
		for _, args := range [][]string{{"help", c}, {c, "--help"}} {
			var stdout, stderr bytes.Buffer
			code := runMain(args, cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			if code != 0 || stderr.Len() != 0 || !strings.Contains(stdout.String(), "Usage: limitd") {
				t.Errorf("%v: exit %d, stderr %q, stdout %.80q", args, code, stderr.String(), stdout.String())
			}
		}
	}
}
