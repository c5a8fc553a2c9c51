package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/limitd/limitd/buildinfo"
)

const versionUsage = `Usage: limitd version [--output table|json]

Prints the module version, the VCS revision and commit time the binary was
built from (when the build recorded them), and the Go version.
Also: limitd --version.

Flags:
`

func runVersion(args []string, env Env) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	output := fs.String("output", "table", "output format: table or json")
	pos, code, ok := parseFlags(fs, args, env, func() { printUsage(env, versionUsage, fs) })
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(env, "version", "unexpected argument %q", pos[0])
	}
	v := buildinfo.Current()
	switch *output {
	case "json":
		b, _ := json.Marshal(v)
		fmt.Fprintf(env.Stdout, "%s\n", b)
	case "table":
		fmt.Fprintf(env.Stdout, "limitd %s\n", v.Version)
		rev := v.Revision
		if rev == "" {
			rev = "unknown (built without VCS information)"
		} else if v.Modified {
			rev += " (modified)"
		}
		fmt.Fprintf(env.Stdout, "revision: %s\n", rev)
		if v.Time != "" {
			fmt.Fprintf(env.Stdout, "time:     %s\n", v.Time)
		}
		fmt.Fprintf(env.Stdout, "go:       %s\n", v.Go)
	default:
		return usageError(env, "version", "--output %q: want table or json", *output)
	}
	return ExitOK
}
