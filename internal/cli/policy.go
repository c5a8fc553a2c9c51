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

	"github.com/limitd/limitd/client"
)

const policyUsage = `Usage: limitd policy put|get|list|delete [flags] [NAME]

  put NAME [limit flags]   create or replace a policy from flags (admin)
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

func policyFlagSet(cf *connFlags, lim *client.Limit, shadow *bool, local *optBool, file *string) *flag.FlagSet {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	registerLimit(fs, lim)
	fs.BoolVar(shadow, "shadow", false, "put: dry run — checks always allow and report shadow_refused")
	fs.Var(local, "local-refusals", "put: =false sends each refusal of the policy through the log instead of the over-limit cache (default true)")
	fs.StringVar(file, "file", "", "put: JSON or YAML file of policies (- for stdin)")
	cf.register(fs)
	return fs
}

func runPolicy(args []string, env Env) int {
	var cf connFlags
	var lim client.Limit
	var shadow bool
	var local optBool
	var file string
	fs := policyFlagSet(&cf, &lim, &shadow, &local, &file)
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
			if lim != (client.Limit{}) || shadow || local.v != nil {
				return usageError(env, name, "give --file or limit flags, not both")
			}
			var err error
			if puts, err = readPolicyFile(file, os.Stdin); err != nil {
				return usageError(env, name, "%v", err)
			}
		} else {
			puts = []client.Policy{{Name: pos[0], Limit: lim, Shadow: shadow, LocalRefusals: local.v}}
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
			stored, err := c.PutPolicy(ctx, p)
			if err != nil {
				return fail(env, fmt.Sprintf("%s %s", name, p.Name), err)
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
	fmt.Fprintln(tw, "NAME\tALGORITHM\tLIMIT\tWINDOW\tBURST\tSHADOW\tLOCAL_REFUSALS")
	for _, p := range ps {
		win := p.Window
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%v\n", p.Name, alg, p.Limit.Limit, win, burst, p.Shadow, p.LocalRefusalsOn())
	}
	tw.Flush()
}

// policyFields are the fields a policy object may have in a file.
var policyFields = map[string]bool{"name": true, "algorithm": true, "limit": true, "window": true, "burst": true,
	"count_refused": true, "calendar": true, "timezone": true, "shadow": true, "local_refusals": true}

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
