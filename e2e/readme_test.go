package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/testtool"
)

// The newcomer's path through README.md, run as written against one limitd
// process started as the quick start starts it (the same flags but its
// ports: free loopback ones stand in for 8080 and 8300, and its node ID is
// its Raft address, as the default is): every command of "Try it with
// curl" with curl itself, then every command of "The CLI" with the built
// binary. Each answer must be what the README shows under the command, but
// for what it says differs by run (times, indexes, addresses). Fails if an
// example errors (curl -f: any 4xx or 5xx), answers other fields or values
// than the README shows, or a command's output or exit status changed.
func TestReadmeTourRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a limitd process")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		testtool.Missing(t, "curl is not installed: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	must(t, err)
	p := newProc(t, "n1", "")
	p.ID = p.RaftAddr // the default node ID, which the README's cluster status shows
	p.start()
	p.waitReady()

	t.Run("curl", func(t *testing.T) {
		block := readmeBlock(t, string(readme), "## Try it with curl", "```sh")
		steps := curlSteps(block)
		if len(steps) < 6 {
			t.Fatalf("%d commands in the curl tour, want at least 6: the parser lost them", len(steps))
		}
		for _, s := range steps {
			cmd := strings.ReplaceAll(s.cmd, "localhost:8080", p.HTTPAddr)
			cmd = regexp.MustCompile(`\bcurl -s`).ReplaceAllString(cmd, "curl -fs")
			run := func() string {
				out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
				if err != nil {
					t.Fatalf("%s\n%v: %s", s.cmd, err, out)
				}
				return string(out)
			}
			out := run()
			if len(s.later) > 0 {
				checkCurlAnswer(t, s.cmd, s.want, out)
				for i := 0; i < s.repeat; i++ {
					out = run()
				}
				checkCurlAnswer(t, s.cmd, s.later, out)
				continue
			}
			checkCurlAnswer(t, s.cmd, s.want, out)
		}
	})

	t.Run("cli", func(t *testing.T) {
		block := readmeBlock(t, string(readme), "## The CLI", "```console")
		cmds := 0
		for _, c := range consoleSteps(block) {
			cmds++
			line := strings.ReplaceAll(c.cmd, "limitd ", limitdBin+" ")
			cmd := exec.Command("bash", "-c", line)
			cmd.Env = append(os.Environ(), "LIMITD_ADDR="+p.HTTPAddr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("$ %s\n%v: %s", c.cmd, err, out)
			}
			got, want := maskCLI(string(out), p), maskCLI(c.want, nil)
			if got != want {
				t.Errorf("$ %s\ngot (masked):\n%s\nREADME (masked):\n%s", c.cmd, got, want)
			}
		}
		if cmds < 3 {
			t.Fatalf("%d commands in the CLI block, want 3", cmds)
		}
	})
}

// readmeBlock is the first fenced block opening with fence after heading.
func readmeBlock(t *testing.T, doc, heading, fence string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", heading)
	}
	_, after, ok = strings.Cut(after, fence+"\n")
	if !ok {
		t.Fatalf("README.md's %q section has no %s block", heading, fence)
	}
	block, _, ok := strings.Cut(after, "\n```")
	if !ok {
		t.Fatalf("README.md's %q block is not closed", heading)
	}
	return block
}

// curlStep is one command of the curl tour with the answer the README
// shows under it; a "... twice more, then:" line splits that answer: later
// is the answer after repeat more runs.
type curlStep struct {
	cmd         string
	want, later []string
	repeat      int
}

// answerLine is a comment line that shows an answer (a JSON body, a status
// line, a header, an elision), not prose about the next command.
var answerLine = regexp.MustCompile(`^# ( *\.\.\.|\{|HTTP/|[A-Z][A-Za-z-]*: )`)

func curlSteps(block string) []curlStep {
	var steps []curlStep
	var cur *curlStep
	open := false // inside a command: a continued line or an open quote
	for _, line := range strings.Split(block, "\n") {
		switch {
		case open:
			cur.cmd += "\n" + line
		case strings.HasPrefix(line, "#"):
			if cur == nil || !answerLine.MatchString(line) {
				continue
			}
			ans := strings.TrimPrefix(line, "# ")
			if strings.Contains(ans, "twice more") {
				cur.repeat = 3 // the second and third allowed, then the refusal shown
				cur.later = []string{}
				continue
			}
			if cur.later != nil {
				cur.later = append(cur.later, ans)
			} else {
				cur.want = append(cur.want, ans)
			}
			continue
		case strings.TrimSpace(line) == "":
			continue
		default:
			steps = append(steps, curlStep{cmd: line})
			cur = &steps[len(steps)-1]
		}
		open = strings.HasSuffix(cur.cmd, `\`) || strings.Count(cur.cmd, "'")%2 == 1
	}
	return steps
}

// checkCurlAnswer compares an answer with the README's lines for it: the
// status line and headers by name and value (the reset time t= and
// Retry-After's seconds differ by run), the JSON body field by field, "..."
// standing for fields or headers not shown, times compared only as zero or
// not.
func checkCurlAnswer(t *testing.T, cmd string, want []string, out string) {
	t.Helper()
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(out), "\r", ""), "\n")
	body := lines[len(lines)-1]
	for _, w := range want {
		switch {
		case strings.HasPrefix(strings.TrimSpace(w), "..."):
		case strings.HasPrefix(w, "{"):
			var got, exp any
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Errorf("%s\nanswer body %q: %v", cmd, body, err)
				continue
			}
			if err := json.Unmarshal([]byte(strings.ReplaceAll(w, ",...", "")), &exp); err != nil {
				t.Fatalf("README's answer %q is not JSON once its elisions are removed: %v", w, err)
			}
			if diff := jsonSubset(exp, got, ""); diff != "" {
				t.Errorf("%s\nanswer %s\nREADME  %s\n%s", cmd, body, w, diff)
			}
		default:
			name, value, _ := strings.Cut(w, ": ")
			found := false
			for _, l := range lines[:len(lines)-1] {
				gn, gv, _ := strings.Cut(l, ": ")
				if strings.HasPrefix(w, "HTTP/") {
					found = found || l == w
					continue
				}
				if !strings.EqualFold(gn, name) {
					continue
				}
				switch strings.ToLower(name) {
				case "retry-after":
					found = gv != "" && gv != "0"
				case "ratelimit":
					found = strings.Split(gv, ";t=")[0] == strings.Split(value, ";t=")[0]
				default:
					found = gv == value
				}
			}
			if !found {
				t.Errorf("%s\nno %q in the answer:\n%s", cmd, w, out)
			}
		}
	}
}

// timeFields are the answer's times until something: they differ by run.
var timeFields = map[string]bool{"reset_after_ms": true, "retry_after_ms": true, "delay_ms": true}

// jsonSubset says where got lacks or differs from a value of exp.
func jsonSubset(exp, got any, at string) string {
	switch e := exp.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %v, want an object", at, got)
		}
		for k, v := range e {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing", at, k)
			}
			if timeFields[k] {
				if (v == 0.0) != (gv == 0.0) {
					return fmt.Sprintf("%s.%s: %v, want %v (zero or not)", at, k, gv, v)
				}
				continue
			}
			if d := jsonSubset(v, gv, at+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) < len(e) {
			return fmt.Sprintf("%s: %v, want at least %d elements", at, got, len(e))
		}
		for i := range e {
			if d := jsonSubset(e[i], g[i], fmt.Sprintf("%s[%d]", at, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(exp, got) {
		return fmt.Sprintf("%s: %v, want %v", at, got, exp)
	}
	return ""
}

// consoleStep is one "$ " command of a console block and the output shown
// under it.
type consoleStep struct{ cmd, want string }

func consoleSteps(block string) []consoleStep {
	var steps []consoleStep
	for _, line := range strings.Split(block, "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, consoleStep{cmd: c})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want += line + "\n"
		}
	}
	return steps
}

// What the CLI's output says that differs by run ("times and indexes differ
// by run"), and the addresses the README's node has where this one has its
// own.
var (
	cliDuration = regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m\d+(\.\d+)?s)\b`)
	cliIndex    = regexp.MustCompile(`(?m)^(term|commit index|applied index)( +)\d+$`)
	cliSpaces   = regexp.MustCompile(` +`)
)

func maskCLI(s string, p *proc) string {
	if p != nil {
		s = strings.ReplaceAll(s, p.HTTPAddr, "127.0.0.1:8080")
		s = strings.ReplaceAll(s, p.RaftAddr, "127.0.0.1:8300")
	}
	s = cliIndex.ReplaceAllString(s, "$1 N")
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "reset_after") {
			l = cliDuration.ReplaceAllString(l, "D")
		}
		lines[i] = cliSpaces.ReplaceAllString(strings.TrimSpace(l), " ")
	}
	return strings.Join(lines, "\n")
}
