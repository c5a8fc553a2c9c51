// Package flagerr turns the errors of package flag into one line that names
// the flag the way the user typed it (--name), suggests the flag a typo was
// probably meant to be, and says what a duration looks like. It is shared by
// serve (internal/daemon), the client commands (internal/cli) and bench so
// that every limitd command reports a bad flag the same way, without the
// usage text: the usage is one --help away and drowned the error.
package flagerr

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// DurationHint is what a time.Duration flag accepts.
const DurationHint = "want e.g. 60s, 1h30m or 500ms"

// WindowHint is what a limit's window accepts (algo.ParseWindow), as the
// HTTP API words it.
const WindowHint = "want e.g. 60s, 1h30m, 500ms or 7d"

// Parse parses args with fs, writing nothing: the usage is the caller's
// (on flag.ErrHelp, returned as is), and any other error comes back as
// Describe's one line.
func Parse(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errors.New(Describe(fs, err))
}

// Describe rewrites an error of fs.Parse: "unknown flag --bogus (did you mean
// --bogo?)", "invalid duration "60" for --window (want e.g. 60s, 1h30m or
// 500ms)", "--addr needs a value". An error it does not know is returned
// with the flag package's "-name" spelled "--name".
func Describe(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		s := "unknown flag --" + name
		if near := Suggest(fs, name); near != "" {
			s += " (did you mean --" + near + "?)"
		}
		return s
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "--" + strings.TrimLeft(name, "-") + " needs a value"
	}
	// invalid value "60" for flag -window: parse error
	// invalid boolean value "x" for -tls: parse error
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		i := strings.LastIndex(rest, " for ")
		j := strings.Index(rest[max(i, 0):], ": ")
		if i < 0 || j < 0 {
			break
		}
		val, name, cause := rest[:i], rest[i+len(" for "):i+j], rest[i+j+2:]
		name = strings.TrimLeft(strings.TrimPrefix(name, "flag "), "-")
		if fl := fs.Lookup(name); fl != nil {
			if g, ok := fl.Value.(flag.Getter); ok {
				switch g.Get().(type) {
				case time.Duration:
					return fmt.Sprintf("invalid duration %s for --%s (%s)", val, name, DurationHint)
				case bool:
					return fmt.Sprintf("invalid value %s for --%s (want true or false)", val, name)
				case int, int64, uint, uint64:
					return fmt.Sprintf("invalid number %s for --%s", val, name)
				case float64:
					return fmt.Sprintf("invalid number %s for --%s", val, name)
				}
			}
		}
		return fmt.Sprintf("invalid value %s for --%s: %s", val, name, cause)
	}
	return strings.ReplaceAll(msg, " -", " --")
}

// Suggest returns the flag of fs closest to name, when it is close enough
// to be a typo (or name is a prefix of it), else "".
func Suggest(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	return Closest(name, names)
}

// Closest returns the candidate closest to name (a flag, a subcommand) when
// it is close enough to be a typo of it or name is a prefix of it, else "".
func Closest(name string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := distance(name, c)
		if len(name) >= 3 && strings.HasPrefix(c, name) {
			d = min(d, 1)
		}
		if best == "" || d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	// At most two edits, and fewer than a third of the word: "--ttl" is not
	// a typo of "--tls".
	if best == "" || bestD > 2 || bestD*3 > max(len(name), 3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b (with a transposition of
// two adjacent letters counted as one edit: the commonest typo).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
