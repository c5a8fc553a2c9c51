package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/client"
)

const policyUsage = `Usage: limitd policy put|get|list|delete [flags] [NAME]

  put NAME [limit flags]   create or replace a policy from flags (admin); a
                           replace is the whole policy: give every flag it
                           keeps (--lease-*, --shadow, ...), or use
                           get --output json and put --file to edit one field
                           (a replace that turns a lease off says so)
  put --file FILE          create or replace the policies in a JSON or YAML
                           file (admin): one policy object with "name", a list
                           of them, or the --policies file format
                           {"policies": {"NAME": {...}}}
  get NAME                 show a policy
  list                     show every policy
  delete NAME              delete a policy (admin)

Example:
  limitd policy put api --algorithm sliding_window --limit 100 --window 60s
  limitd policy put payments --algorithm fixed_window --limit 100 --window 1h --local-refusals=false
  limitd policy put quota --algorithm fixed_window --limit 1000000 --calendar day --lease-share 0.05 --lease-max-ttl 2s
  limitd policy put login --algorithm fixed_window --limit 5 --window 1m --ban 10m --ban-escalate 1h,24h --ban-forget-after 7d
  limitd policy get quota --output json > quota.json   # edit, then:
  limitd policy put --file quota.json
  limitd policy put --file policies.yaml
  limitd policy list --output json

Flags:
`

// optBool is a boolean flag that remembers whether it was given, so that an
// absent --local-refusals leaves the field to the server's default.
type optBool struct{ v *bool }

func (o *optBool) String() string {
	if o == nil || o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	o.v = &b
	return nil
}

func (o *optBool) IsBoolFlag() bool { return true }

// optFloat is a float flag that remembers whether it was given, so that an
// absent --lease-share leaves the share to the server's default while an
// explicit 0 is sent (and refused by the server, naming lease.share).
type optFloat struct{ v *float64 }

func (o *optFloat) String() string {
	if o == nil || o.v == nil {
		return ""
	}
	return strconv.FormatFloat(*o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	o.v = &f
	return nil
}

// leaseFlags are put's --lease* flags: any of them gives the policy a lease
// option; the values the flags leave out take the server's defaults.
type leaseFlags struct {
	on     bool
	share  optFloat
	maxTTL string
	strict optBool
}

func (l *leaseFlags) register(fs *flag.FlagSet) {
	// The defaults and bounds are the server's (algo), quoted for the help.
	share := strconv.FormatFloat(float64(algo.DefaultLeaseShare)/float64(algo.LeaseShareScale), 'g', -1, 64)
	ttl, maxTTL := algo.FormatWindow(algo.DefaultLeaseTTL), algo.FormatWindow(algo.MaxLeaseTTL)
	fs.BoolVar(&l.on, "lease", false, "put: quota leases with the server's defaults (share "+share+", max_ttl "+ttl+"); implied by the other --lease-* flags")
	fs.Var(&l.share, "lease-share", "put: quota leases: the part of what remains one lease takes, 0 < S <= 1 (default "+share+")")
	fs.StringVar(&l.maxTTL, "lease-max-ttl", "", "put: quota leases: how long a lease may be spent, at most "+maxTTL+" (default "+ttl+")")
	fs.Var(&l.strict, "lease-strict", "put: quota leases: the lease option's \"strict\", true or false (docs/API.md, Leases; default: the server's)")
}

func (l *leaseFlags) given() bool {
	return l.on || l.share.v != nil || l.maxTTL != "" || l.strict.v != nil
}

// lease is the policy's lease option (nil: no flag given).
func (l *leaseFlags) lease() *client.Lease {
	if !l.given() {
		return nil
	}
	return &client.Lease{Share: l.share.v, MaxTTL: l.maxTTL, Strict: l.strict.v}
}

func policyFlagSet(cf *connFlags, lim *client.Limit, shadow *bool, local *optBool, lease *leaseFlags, file *string) *flag.FlagSet {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	registerLimit(fs, lim)
	fs.BoolVar(shadow, "shadow", false, "put: dry run — checks always allow and report shadow_refused")
	fs.Var(local, "local-refusals", "put: =false sends each refusal of the policy through the log instead of the over-limit cache (default true)")
	lease.register(fs)
	fs.StringVar(file, "file", "", "put: JSON or YAML file of policies (- for stdin)")
	cf.register(fs)
	return fs
}

func runPolicy(args []string, env Env) int {
	var cf connFlags
	var lim client.Limit
	var shadow bool
	var local optBool
	var lease leaseFlags
	var file string
	fs := policyFlagSet(&cf, &lim, &shadow, &local, &lease, &file)
	var ban banFlags // lists.go
	ban.register(fs)
	var notify notifyFlag // webhooks.go
	fs.Var(&notify, "notify", "put: alert thresholds, fractions of the limit, comma separated (e.g. 0.8,1; docs/API.md, Alerts)")
	var degraded string
	fs.StringVar(&degraded, "degraded", "", `put: "share": a node that reaches no quorum decides alone with its share of the limit (docs/CLUSTER.md, Degraded mode)`)
	var resExpiry string
	fs.StringVar(&resExpiry, "reservation-expiry", "", `put: "return": a reservation whose hold ends unsettled gives its estimate back; "settle" (the default) keeps it charged (docs/API.md, Costs known later)`)
	sub, pos, code, ok := parseSubcommand(env, "policy", policyUsage, fs, args, "put", "get", "list", "delete")
	if !ok {
		return code
	}
	name := "policy " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	wantArgs := 1
	if sub == "list" || (sub == "put" && file != "") {
		wantArgs = 0
	}
	if len(pos) != wantArgs {
		if wantArgs == 0 {
			return usageError(env, name, "unexpected argument %q", pos[0])
		}
		return usageError(env, name, "want exactly one policy NAME, got %d arguments", len(pos))
	}
	var puts []client.Policy
	if sub == "put" {
		if file != "" {
			if lim != (client.Limit{}) || shadow || local.v != nil || lease.given() || ban.given() || notify != nil || degraded != "" || resExpiry != "" {
				return usageError(env, name, "give --file or limit flags, not both")
			}
			var err error
			if puts, err = readPolicyFile(file, os.Stdin); err != nil {
				return usageError(env, name, "%v", err)
			}
		} else {
			puts = []client.Policy{{Name: pos[0], Limit: lim, Shadow: shadow, LocalRefusals: local.v, Lease: lease.lease(), OnExceed: ban.onExceed(), Notify: notify, ReservationExpiry: resExpiry}}
			if degraded != "" {
				puts[0].Degraded = &client.Degraded{Mode: degraded}
			}
		}
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	var out []client.Policy
	switch sub {
	case "put":
		for _, p := range puts {
			// A put replaces the whole policy: read what it replaces, so
			// that turning a lease off is said, not silent. (A failed read
			// only loses the note.)
			prev, prevErr := c.GetPolicy(ctx, p.Name)
			stored, err := c.PutPolicy(ctx, p)
			if err != nil {
				return fail(env, fmt.Sprintf("%s %s", name, p.Name), err)
			}
			if prevErr == nil && prev.Lease != nil && stored.Lease == nil {
				fmt.Fprintf(env.Stderr, "limitd %s %s: note: the policy had a lease (%s) and this put has none, so its leases are off; give --lease-* flags (or \"lease\" in a --file) to keep one\n",
					name, p.Name, leaseText(prev.Lease))
			}
			if prevErr == nil && prev.OnExceed != nil && stored.OnExceed == nil {
				fmt.Fprintf(env.Stderr, "limitd %s %s: note: the policy had on_exceed (ban %s) and this put has none, so it bans no more; give --ban flags (or \"on_exceed\" in a --file) to keep it\n",
					name, p.Name, prev.OnExceed.Ban)
			}
			out = append(out, stored)
		}
	case "get":
		p, err := c.GetPolicy(ctx, pos[0])
		if err != nil {
			return fail(env, name, err)
		}
		out = []client.Policy{p}
	case "list":
		if out, err = c.ListPolicies(ctx); err != nil {
			return fail(env, name, err)
		}
	case "delete":
		if err := c.DeletePolicy(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]any{"name": pos[0], "deleted": true})
		} else {
			fmt.Fprintf(env.Stdout, "policy %q deleted\n", pos[0])
		}
		return ExitOK
	}
	if cf.output == "json" {
		if sub == "list" {
			if out == nil {
				out = []client.Policy{}
			}
			printJSON(env.Stdout, map[string]any{"policies": out})
		} else if len(out) == 1 {
			printJSON(env.Stdout, out[0])
		} else {
			printJSON(env.Stdout, out)
		}
		return ExitOK
	}
	printPolicies(env.Stdout, out)
	return ExitOK
}

func printPolicies(w io.Writer, ps []client.Policy) {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tALGORITHM\tLIMIT\tWINDOW\tBURST\tSHADOW\tLOCAL_REFUSALS\tLEASE")
	for _, p := range ps {
		win := p.Window
		if p.Hold != "" { // concurrency: a slot's hold, not a window
			win = "hold " + p.Hold + " (max " + p.MaxHold + ")"
		}
		if p.Calendar != "" {
			win = "calendar " + p.Calendar
			if p.Timezone != "" {
				win += " " + p.Timezone
			}
		}
		burst := "-"
		if p.Burst != 0 {
			burst = fmt.Sprint(p.Burst)
		}
		alg := p.Algorithm
		if p.CountRefused {
			alg += " (count refused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%v\t%s\n", p.Name, alg, p.Limit.Limit, win, burst, p.Shadow, p.LocalRefusalsOn(), leaseText(p.Lease))
	}
	tw.Flush()
}

// leaseText is a lease option in the table: "-" for none, else
// "share=0.05,max_ttl=2s" (",strict=true" or false when the server answers
// it). The server sets share and max_ttl; "default" stands for one left out.
func leaseText(l *client.Lease) string {
	if l == nil {
		return "-"
	}
	share, ttl := "default", "default"
	if l.Share != nil {
		share = strconv.FormatFloat(*l.Share, 'g', -1, 64)
	}
	if l.MaxTTL != "" {
		ttl = l.MaxTTL
	}
	s := "share=" + share + ",max_ttl=" + ttl
	if l.Strict != nil {
		s += ",strict=" + strconv.FormatBool(*l.Strict)
	}
	return s
}

// policyFields are the fields a policy object may have in a file.
var policyFields = map[string]bool{"name": true, "algorithm": true, "limit": true, "window": true, "burst": true,
	"count_refused": true, "calendar": true, "timezone": true, "shadow": true, "local_refusals": true, "lease": true,
	"hold": true, "max_hold": true, "degraded": true}

// leaseFields are the fields of a policy's "lease" object in a file.
var leaseFields = map[string]bool{"share": true, "max_ttl": true, "strict": true}

// readPolicyFile reads policies from a JSON or YAML file: one policy object
// with "name", a list of them, or {"policies": {NAME: {...}}}. Unknown
// fields are refused by name, as the server would.
func readPolicyFile(path string, stdin io.Reader) ([]client.Policy, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, 16<<20))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not JSON or YAML: %v", path, err)
	}
	var objs []map[string]any
	switch v := doc.(type) {
	case map[string]any:
		if ps, ok := v["policies"]; ok && len(v) == 1 {
			m, ok := ps.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: \"policies\" must map names to policies", path)
			}
			names := make([]string, 0, len(m))
			for n := range m {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				o, ok := m[n].(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: policy %q: want an object", path, n)
				}
				if _, has := o["name"]; !has {
					o["name"] = n
				}
				objs = append(objs, o)
			}
		} else {
			objs = []map[string]any{v}
		}
	case []any:
		for i, e := range v {
			o, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: entry %d: want a policy object", path, i)
			}
			objs = append(objs, o)
		}
	default:
		return nil, fmt.Errorf("%s: want a policy object, a list of them, or {\"policies\": {...}}", path)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%s: no policies", path)
	}
	out := make([]client.Policy, 0, len(objs))
	for i, o := range objs {
		label := fmt.Sprintf("entry %d", i)
		if n, ok := o["name"].(string); ok && n != "" {
			label = fmt.Sprintf("policy %q", n)
		}
		for k := range o {
			if !policyFields[k] {
				return nil, fmt.Errorf("%s: %s: unknown field %q", path, label, k)
			}
		}
		if l, ok := o["lease"]; ok && l != nil { // null is no lease, as over HTTP
			lm, ok := l.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: %s: lease: want an object such as {\"share\": 0.05, \"max_ttl\": \"2s\"}", path, label)
			}
			for k := range lm {
				if !leaseFields[k] {
					return nil, fmt.Errorf("%s: %s: unknown field %q", path, label, "lease."+k)
				}
			}
		}
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", path, label, err)
		}
		var p client.Policy
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("%s: %s: %s: want a %s", path, label, te.Field, te.Type)
			}
			return nil, fmt.Errorf("%s: %s: %v", path, label, err)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("%s: %s: name: is required", path, label)
		}
		out = append(out, p)
	}
	return out, nil
}
