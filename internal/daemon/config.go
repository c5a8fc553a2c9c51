package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/limitd/limitd/internal/flagerr"
)

// Configuration sources of limitd serve, highest precedence first:
//
//  1. command-line flags;
//  2. environment variables: LIMITD_ and the flag name in upper case with
//     "-" as "_" (LIMITD_DATA_DIR);
//  3. the YAML file named by --config (or LIMITD_CONFIG): a mapping whose
//     keys are flag names and whose values are what the flag would take
//     (durations as strings such as "100ms"; join may be a list);
//  4. the defaults shown by --help, each an exported Default* constant of
//     the package that owns the setting.
//
// A setting is taken from the first source that has it; sources are not
// merged within one setting (a --join on the command line replaces the
// file's join list rather than adding to it).

const serveUsage = `Usage: limitd [serve] [flags]

Runs a limitd node. Every flag can also be set in the environment, as LIMITD_
and the flag name in upper case with - as _ (e.g. LIMITD_DATA_DIR), and in a
YAML file given with --config, keyed by flag name:

  http-addr: 127.0.0.1:8080
  data-dir: /var/lib/limitd
  join: [http://10.0.0.1:8080, http://10.0.0.2:8080]
  batch-max-wait: 1ms

Precedence: command-line flag, then environment, then file, then default.
Unknown keys in the file are an error.

Flags:
`

// flagsError is a bad command line: the flag package's error in one line
// (internal/flagerr) and where the flags are listed.
type flagsError struct{ err error }

func (e *flagsError) Error() string {
	return "serve: " + e.err.Error() + "; run 'limitd serve --help' for the flags"
}

// loadServeFlags parses the command line, then fills every flag it did not
// set from the environment (lookupEnv) and then from the --config file.
func loadServeFlags(args []string, lookupEnv func(string) (string, bool), out io.Writer) (*serveFlags, error) {
	fs, f := newServeFlagSet(out)
	if err := flagerr.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return nil, err
		}
		return nil, &flagsError{err}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := applyEnv(fs, set, lookupEnv); err != nil {
		return nil, err
	}
	if f.conf != "" {
		if err := applyConfigFile(fs, f.conf, set); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "LIMITD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag not in set from its LIMITD_ variable and adds it to set.
func applyEnv(fs *flag.FlagSet, set map[string]bool, lookupEnv func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || err != nil {
			return
		}
		env := envName(fl.Name)
		if v, ok := lookupEnv(env); ok {
			if e := fs.Set(fl.Name, v); e != nil {
				err = fmt.Errorf("%s: %s", env, invalidValue(fl, v, e))
				return
			}
			set[fl.Name] = true
		}
	})
	return err
}

// invalidValue words a value a flag refused from the environment or the
// file: a duration says what one looks like (the flag package says only
// "parse error").
func invalidValue(fl *flag.Flag, v string, err error) string {
	if g, ok := fl.Value.(flag.Getter); ok {
		if _, ok := g.Get().(time.Duration); ok {
			return fmt.Sprintf("invalid duration %q (%s)", v, flagerr.DurationHint)
		}
	}
	return fmt.Sprintf("invalid value %q: %v", v, err)
}

// maxConfigFile bounds the --config file: a settings file, not data.
const maxConfigFile = 1 << 20

// applyConfigFile sets every flag not in set from the YAML file at path.
// The file is strict: a key that is not a flag, a key given twice, a
// mapping or list where a value belongs, or a value the flag refuses is an
// error naming the file, line and key.
func applyConfigFile(fs *flag.FlagSet, path string, set map[string]bool) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxConfigFile+1))
	if err != nil {
		return fmt.Errorf("--config: read %s: %w", path, err)
	}
	if len(data) > maxConfigFile {
		return fmt.Errorf("--config %s: larger than %d bytes", path, maxConfigFile)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	if doc.Kind == 0 { // an empty file
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("--config %s:%d: the file must be a mapping of flag names to values", path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		at := fmt.Sprintf("--config %s:%d: %q", path, k.Line, name)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("--config %s:%d: keys must be flag names", path, k.Line)
		}
		if line, dup := seen[name]; dup {
			return fmt.Errorf("%s: given twice (first on line %d)", at, line)
		}
		seen[name] = k.Line
		fl := fs.Lookup(name)
		if fl == nil || name == "config" {
			return fmt.Errorf("%s: unknown key (keys are the flag names of limitd serve --help, without --config)", at)
		}
		var values []string
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			values = []string{v.Value}
		case v.Kind == yaml.SequenceNode && isList(fl):
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return fmt.Errorf("%s: line %d: list items must be plain values", at, item.Line)
				}
				values = append(values, item.Value)
			}
		case v.Kind == yaml.ScalarNode:
			return fmt.Errorf("%s: no value", at)
		default:
			return fmt.Errorf("%s: line %d: want a plain value, not a list or mapping", at, v.Line)
		}
		if set[name] {
			continue // a flag or the environment set it: they win
		}
		for _, val := range values {
			if err := fs.Set(name, val); err != nil {
				return fmt.Errorf("%s: %s", at, invalidValue(fl, val, err))
			}
		}
	}
	return nil
}

// listFlag is a flag whose value accumulates (--join).
type listFlag interface{ isList() }

func isList(fl *flag.Flag) bool {
	_, ok := fl.Value.(listFlag)
	return ok
}

// joinList is --join: comma-separated addresses, the flag repeatable.
type joinList []string

func (j *joinList) String() string {
	if j == nil {
		return ""
	}
	return strings.Join(*j, ",")
}

func (j *joinList) Set(v string) error {
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			*j = append(*j, a)
		}
	}
	return nil
}

func (j *joinList) isList() {}
