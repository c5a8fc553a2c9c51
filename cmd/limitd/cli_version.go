package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"runtime/debug"
)

// versionInfo is what `limitd version` reports, from the binary's build info.
type versionInfo struct {
	Version  string `json:"version"`            // module version, "(devel)" for a source build
	Revision string `json:"revision,omitempty"` // VCS revision
	Time     string `json:"time,omitempty"`     // VCS commit time
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go"`
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

func currentVersion() versionInfo {
	v := versionInfo{Version: "unknown", Go: "unknown"}
	bi, ok := readBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

const versionUsage = `Usage: limitd version [--output table|json]

Prints the module version, the VCS revision and commit time the binary was
built from (when the build recorded them), and the Go version.
Also: limitd --version.

Flags:
`

func runVersion(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	output := fs.String("output", "table", "output format: table or json")
	pos, code, ok := parseFlags(fs, args, env, func() { printUsage(env, versionUsage, fs) })
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(env, "version", "unexpected argument %q", pos[0])
	}
	v := currentVersion()
	switch *output {
	case "json":
		b, _ := json.Marshal(v)
		fmt.Fprintf(env.stdout, "%s\n", b)
	case "table":
		fmt.Fprintf(env.stdout, "limitd %s\n", v.Version)
		rev := v.Revision
		if rev == "" {
			rev = "unknown (built without VCS information)"
		} else if v.Modified {
			rev += " (modified)"
		}
		fmt.Fprintf(env.stdout, "revision: %s\n", rev)
		if v.Time != "" {
			fmt.Fprintf(env.stdout, "time:     %s\n", v.Time)
		}
		fmt.Fprintf(env.stdout, "go:       %s\n", v.Go)
	default:
		return usageError(env, "version", "--output %q: want table or json", *output)
	}
	return exitOK
}
