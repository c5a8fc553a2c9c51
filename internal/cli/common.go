package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/internal/flagerr"
)

// Exit codes of the client commands (check, policy, key, cluster, snapshot)
// and of `limitd help`, documented in docs/CLIENT.md:
const (
	ExitOK          = 0 // done; for check: allowed
	ExitRefused     = 1 // check only: the request was refused
	ExitUsage       = 2 // bad flags or arguments, or input the server rejected as invalid (invalid_argument)
	ExitUnavailable = 3 // no node answered in time (no leader, unreachable, timeout)
	ExitError       = 4 // any other error: not found, conflict, a damaged file…
	ExitConfig      = 5 // the client's configuration: certificate, scheme, host, token; retrying will not help
)

// DefaultCLIAddr is where the client commands look for a node when neither
// --addr nor LIMITD_ADDR is set: serve's default --http-addr.
const DefaultCLIAddr = "127.0.0.1:8080"

// DefaultCLITimeout bounds one client command, retries included.
const DefaultCLITimeout = 10 * time.Second

// Env is what a client command reads and writes: its output streams and
// its environment variables (LIMITD_ADDR, LIMITD_ADMIN_TOKEN); tests
// replace it.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// OSEnv is the process's own Env.
func OSEnv() Env { return Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

// commands are the client commands (and version), by name.
var commands = map[string]func([]string, Env) int{
	"check":    runCheck,
	"policy":   runPolicy,
	"plan":     runPlan,
	"list":     runList, // lists.go
	"bans":     runBans,
	"key":      runKey,
	"keys":     runKeys,   // keys.go: the usage inventory
	"usage":    runUsage,  // usage.go: usage history and its export
	"slot":     runSlot,   // slots.go
	"settle":   runSettle, // costs.go
	"refund":   runRefund,
	"cluster":  runCluster,
	"snapshot": runSnapshot,
	"version":  runVersion,
	"webhook":  runWebhook, // webhooks.go
	"events":   runEvents,  // events.go
}

// Run runs the client command name (check, policy, key, cluster, snapshot or
// version) with args, the words after its name, and returns its exit
// status; ok is false, and nothing is run, for another name.
func Run(name string, args []string, env Env) (code int, ok bool) {
	run, ok := commands[name]
	if !ok {
		return 0, false
	}
	return run(args, env), true
}

// isHelp reports a help flag given in place of a subcommand.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

func printUsage(env Env, text string, fs *flag.FlagSet) {
	fmt.Fprint(env.Stdout, text)
	fs.SetOutput(env.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// connFlags are the flags every client command shares.
type connFlags struct {
	addr, token            string
	tlsCA, tlsCert, tlsKey string
	tls, tlsSkipVerify     bool
	timeout                time.Duration
	output                 string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "comma-separated node addresses, host:port or http(s)://host:port (default $LIMITD_ADDR, else "+DefaultCLIAddr+")")
	fs.StringVar(&c.token, "token", "", "admin bearer token (default $LIMITD_ADMIN_TOKEN)")
	fs.BoolVar(&c.tls, "tls", false, "use HTTPS (implied by an https:// address or any other --tls-* flag)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA bundle that signed the nodes' certificates (default: system roots)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate file, for nodes that require one (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "private key file of --tls-cert")
	fs.BoolVar(&c.tlsSkipVerify, "tls-insecure-skip-verify", false, "do not verify the nodes' certificates (testing only)")
	fs.DurationVar(&c.timeout, "timeout", DefaultCLITimeout, "give up after this long, retries and leader changes included")
	fs.StringVar(&c.output, "output", "table", "output format: table or json")
}

// validate checks the shared flags and fills defaults from the environment.
func (c *connFlags) validate(env Env) error {
	if c.addr == "" {
		c.addr = env.Getenv("LIMITD_ADDR")
	}
	if c.addr == "" {
		c.addr = DefaultCLIAddr
	}
	if c.token == "" {
		c.token = env.Getenv("LIMITD_ADMIN_TOKEN")
	}
	if c.output != "table" && c.output != "json" {
		return fmt.Errorf("--output %q: want table or json", c.output)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

func (c *connFlags) newClient() (*client.Client, error) {
	opts := []client.Option{client.WithToken(c.token), client.WithTimeout(c.timeout)}
	if c.tls || c.tlsCA != "" || c.tlsCert != "" || c.tlsSkipVerify {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.tlsSkipVerify}
		if c.tlsCA != "" {
			pem, err := os.ReadFile(c.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s: no certificates found", c.tlsCA)
			}
			tc.RootCAs = pool
		}
		if c.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, client.WithTLS(tc))
	}
	return client.New([]string{c.addr}, opts...)
}

// dial makes a command's client and the context of its calls (bounded by
// --timeout); done closes both.
func (c *connFlags) dial() (cl *client.Client, ctx context.Context, done func(), err error) {
	cl, err = c.newClient()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// parseFlags parses flags that may come before, between or after the
// positional arguments, and returns the positional ones. Help goes to stdout.
func parseFlags(fs *flag.FlagSet, args []string, env Env, usage func()) ([]string, int, bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, ExitOK, false
			}
			return nil, usageError(env, fs.Name(), "%s", flagerr.Describe(fs, err)), false
		}
		args = fs.Args()
		if len(args) == 0 || args[0] == "--" {
			if len(args) > 0 {
				pos = append(pos, args[1:]...)
			}
			if err := checkWindowFlag(fs); err != nil {
				return nil, usageError(env, fs.Name(), "%v", err), false
			}
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// checkWindowFlag refuses a --window the server would refuse, before any
// connection: the mistake is the command line's, and the answer should not
// depend on reaching a node.
func checkWindowFlag(fs *flag.FlagSet) error {
	fl := fs.Lookup("window")
	if fl == nil || fl.Value.String() == "" {
		return nil
	}
	v := fl.Value.String()
	if _, err := algo.ParseWindow(v); err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			if rest, ok := strings.CutPrefix(fe.Message, fmt.Sprintf("invalid duration %q ", v)); ok {
				return fmt.Errorf("invalid duration %q for --window %s", v, rest)
			}
			return fmt.Errorf("--window %q: %s", v, fe.Message)
		}
		return fmt.Errorf("--window %q: %v", v, err)
	}
	return nil
}

// parseSubcommand reads "GROUP SUB [flags] [args]" for a command group
// (cluster, policy, snapshot): SUB must be one of subs; then fs parses the
// rest. When ok is false, code is the exit status to return (help printed,
// or a usage error written).
func parseSubcommand(env Env, group, usage string, fs *flag.FlagSet, args []string, subs ...string) (sub string, pos []string, code int, ok bool) {
	want := strings.Join(subs[:len(subs)-1], ", ") + " or " + subs[len(subs)-1]
	if len(args) == 0 || isHelp(args[0]) {
		if len(args) > 0 {
			printUsage(env, usage, fs)
			return "", nil, ExitOK, false
		}
		return "", nil, usageError(env, group, "want a subcommand: %s", want), false
	}
	sub = args[0]
	if !slices.Contains(subs, sub) {
		if near := flagerr.Closest(sub, subs); near != "" {
			return "", nil, usageError(env, group, "unknown subcommand %q (did you mean %s?)", sub, near), false
		}
		return "", nil, usageError(env, group, "unknown subcommand %q (want %s)", sub, want), false
	}
	pos, code, ok = parseFlags(fs, args[1:], env, func() { printUsage(env, usage, fs) })
	return sub, pos, code, ok
}

// usageError reports a bad invocation.
func usageError(env Env, name, format string, a ...any) int {
	top, _, _ := strings.Cut(name, " ")
	fmt.Fprintf(env.Stderr, "limitd %s: %s\nRun 'limitd help %s' for usage.\n", name, fmt.Sprintf(format, a...), top)
	return ExitUsage
}

// fail reports err and returns its exit code. name is the command the user
// ran ("check"), never the API path it went by.
func fail(env Env, name string, err error) int {
	msg := strings.TrimPrefix(err.Error(), "limitd: ")
	if fix := configFix(err); fix != "" {
		msg += "\n  " + fix
	}
	fmt.Fprintf(env.Stderr, "limitd %s: %s\n", name, msg)
	return exitCode(err)
}

// configFix names the flag that fixes a configuration error, or "".
func configFix(err error) string {
	var ce *client.ConfigError
	if errors.As(err, &ce) {
		switch ce.Kind {
		case client.ConfigUnknownAuthority:
			return "fix: give the CA bundle that signed the nodes' certificates with --tls-ca FILE"
		case client.ConfigHostname:
			return "fix: use in --addr a name or IP the node's certificate lists (or reissue the certificate with it)"
		case client.ConfigBadCertificate:
			return "fix: the node's certificate is expired or invalid: renew it (serve --tls-cert)"
		case client.ConfigNotTLS:
			return "fix: the node serves plain HTTP: drop --tls and the --tls-* flags, or use http:// in --addr"
		case client.ConfigTLSRequired:
			return "fix: the node serves HTTPS: add --tls (and --tls-ca FILE for a private CA), or use https:// in --addr"
		case client.ConfigUnknownHost:
			return "fix: the host in --addr (or LIMITD_ADDR) does not resolve"
		case client.ConfigClientCert:
			return "fix: the node requires a client certificate it trusts: give --tls-cert and --tls-key"
		}
	}
	if errors.Is(err, client.ErrUnauthenticated) {
		return "fix: give the node's admin token with --token or LIMITD_ADMIN_TOKEN"
	}
	return ""
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, client.ErrConfig), errors.Is(err, client.ErrUnauthenticated):
		return ExitConfig
	case errors.Is(err, client.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, client.ErrInvalidArgument):
		return ExitUsage
	}
	return ExitError
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// limitFlags are the inline-limit flags of check and key.
type limitFlags struct {
	policy string
	lim    client.Limit
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.policy, "policy", "", "policy name (or give an inline limit with --algorithm, --limit, --window…)")
	registerLimit(fs, &l.lim)
}

func registerLimit(fs *flag.FlagSet, lim *client.Limit) {
	fs.StringVar(&lim.Algorithm, "algorithm", "", "fixed_window, sliding_log, sliding_window, token_bucket or leaky_bucket")
	fs.Int64Var(&lim.Limit, "limit", 0, "requests (cost units) per window")
	fs.StringVar(&lim.Window, "window", "", "window: 500ms, 60s, 1h30m, 7d…")
	fs.Int64Var(&lim.Burst, "burst", 0, "token_bucket and leaky_bucket: capacity (default = limit)")
	fs.BoolVar(&lim.CountRefused, "count-refused", false, "sliding_log only: log refused requests too")
	fs.StringVar(&lim.Calendar, "calendar", "", "fixed_window only: day, week or month instead of --window")
	fs.StringVar(&lim.Timezone, "timezone", "", "IANA zone of --calendar windows (default UTC)")
	fs.StringVar(&lim.Hold, "hold", "", "concurrency only: how long an acquired slot is held, e.g. 30s")
	fs.StringVar(&lim.MaxHold, "max-hold", "", "concurrency only: the longest renewals may keep a slot (default 10 × --hold)")
}

// resolve returns the policy name or the inline limit; exactly one.
func (l *limitFlags) resolve() (string, *client.Limit, error) {
	inline := l.lim != (client.Limit{})
	switch {
	case l.policy != "" && inline:
		return "", nil, errors.New("give --policy or an inline limit (--algorithm, --limit, …), not both")
	case l.policy == "" && !inline:
		return "", nil, errors.New("give --policy NAME or an inline limit (--algorithm, --limit, --window)")
	case inline:
		lim := l.lim
		return "", &lim, nil
	}
	return l.policy, nil, nil
}

// decisionJSON is a decision in the API's JSON form.
type decisionJSON struct {
	Allowed       bool   `json:"allowed"`
	Limit         int64  `json:"limit"`
	Remaining     int64  `json:"remaining"`
	ResetAfterMS  int64  `json:"reset_after_ms"`
	RetryAfterMS  int64  `json:"retry_after_ms"`
	DelayMS       int64  `json:"delay_ms"`
	ShadowRefused bool   `json:"shadow_refused,omitempty"`
	Replayed      bool   `json:"replayed,omitempty"`
	Reason        string `json:"reason,omitempty"`
	// Degraded: not decided by a quorum (the node alone, or the client's fail mode).
	Degraded bool `json:"degraded,omitempty"`
	// A concurrency limit's slot (omitted without one).
	Slot          string `json:"slot,omitempty"`
	SlotExpiresMS int64  `json:"slot_expires_ms,omitempty"`
}

func toDecisionJSON(d client.Decision) decisionJSON {
	out := decisionJSON{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfterMS: d.ResetAfter.Milliseconds(), RetryAfterMS: d.RetryAfter.Milliseconds(),
		DelayMS: d.Delay.Milliseconds(), ShadowRefused: d.ShadowRefused, Replayed: d.Replayed, Reason: d.Reason,
		Slot: d.Slot, SlotExpiresMS: d.SlotExpires.Milliseconds(), Degraded: d.Degraded}
	if d.RetryAfter == client.Never {
		out.RetryAfterMS = -1
	}
	return out
}

func printDecision(w io.Writer, key string, d client.Decision) {
	tw := newTable(w)
	fmt.Fprintf(tw, "key\t%s\n", key)
	fmt.Fprintf(tw, "allowed\t%v\n", d.Allowed)
	fmt.Fprintf(tw, "limit\t%d\n", d.Limit)
	fmt.Fprintf(tw, "remaining\t%d\n", d.Remaining)
	retry := d.RetryAfter.String()
	if d.RetryAfter == client.Never {
		retry = "never (cost above the limit)"
		if d.Reason == "denied" {
			retry = "never (a deny list without expiry)"
		}
	}
	fmt.Fprintf(tw, "retry_after\t%s\n", retry)
	fmt.Fprintf(tw, "reset_after\t%s\n", d.ResetAfter)
	if d.Delay > 0 {
		fmt.Fprintf(tw, "delay\t%s\n", d.Delay)
	}
	if d.ShadowRefused {
		fmt.Fprintf(tw, "shadow_refused\ttrue\n")
	}
	if d.Replayed {
		fmt.Fprintf(tw, "replayed\ttrue\n")
	}
	if d.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", d.Reason)
	}
	if d.Slot != "" {
		fmt.Fprintf(tw, "slot\t%s\nslot_expires\t%s\n", d.Slot, d.SlotExpires)
	}
	if d.Degraded {
		fmt.Fprintf(tw, "degraded\ttrue (not decided by a quorum)\n")
	}
	tw.Flush()
}
