package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/limitd/limitd/client"
)

const planUsage = `Usage: limitd plan put|get|list|delete|assign|default [flags] [ARGS]

  put NAME --file FILE     create or replace a plan from a JSON or YAML file
                           (- for stdin) holding {"limits": {"NAME": {limit}}}
                           (admin); each limit has an inline limit's fields
  get NAME                 show a plan
  list                     show every plan and the default plan
  delete NAME              delete a plan (admin)
  assign KEY PLAN          give KEY the plan (admin); PLAN "-" removes its
                           assignment
  assign --file FILE       assign many keys at once, all or none (admin): JSON
                           lines {"key": ..., "plan": ...}, or key,plan CSV
                           when FILE ends in .csv (or with --csv)
  default [PLAN]           show the default plan, or set it (admin; "-" clears)

Example:
  limitd plan put pro --file pro.yaml
  limitd plan assign tenant:acme pro
  limitd plan assign --file customers.csv
  limitd plan default free
  limitd plan list --output json

Flags:
`

func runPlan(args []string, env Env) int {
	var cf connFlags
	var file string
	var csv bool
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.StringVar(&file, "file", "", "put: the plan's JSON or YAML file; assign: the bulk assignment file (- for stdin)")
	fs.BoolVar(&csv, "csv", false, "assign --file: the file is key,plan CSV (default: by the .csv extension, else JSON lines)")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "plan", planUsage, fs, args, "put", "get", "list", "delete", "assign", "default")
	if !ok {
		return code
	}
	name := "plan " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	want := map[string][2]int{"put": {1, 1}, "get": {1, 1}, "list": {0, 0}, "delete": {1, 1}, "assign": {2, 2}, "default": {0, 1}}[sub]
	if sub == "assign" && file != "" {
		want = [2]int{0, 0}
	}
	if len(pos) < want[0] || len(pos) > want[1] {
		return usageError(env, name, "want %s, got %d arguments", map[string]string{
			"put": "NAME", "get": "NAME", "list": "no arguments", "delete": "NAME",
			"assign": "KEY PLAN, or --file FILE and no arguments", "default": "at most one PLAN"}[sub], len(pos))
	}
	if file != "" && sub != "put" && sub != "assign" {
		return usageError(env, name, "--file is for put and assign")
	}
	var put client.Plan
	var bulk []byte
	switch {
	case sub == "put":
		if file == "" {
			return usageError(env, name, "give the plan's limits with --file FILE")
		}
		var err error
		if put, err = readPlanFile(file, os.Stdin); err != nil {
			return usageError(env, name, "%v", err)
		}
		put.Name = pos[0]
	case sub == "assign" && file != "":
		var err error
		if bulk, err = readInput(file, os.Stdin); err != nil {
			return usageError(env, name, "%v", err)
		}
		csv = csv || strings.HasSuffix(file, ".csv")
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	switch sub {
	case "put":
		p, err := c.PutPlan(ctx, put)
		if err != nil {
			return fail(env, name+" "+put.Name, err)
		}
		return printPlans(env, cf.output, []client.Plan{p}, "", false)
	case "get":
		p, err := c.GetPlan(ctx, pos[0])
		if err != nil {
			return fail(env, name, err)
		}
		return printPlans(env, cf.output, []client.Plan{p}, "", false)
	case "list":
		ps, def, err := c.ListPlans(ctx)
		if err != nil {
			return fail(env, name, err)
		}
		return printPlans(env, cf.output, ps, def, true)
	case "delete":
		if err := c.DeletePlan(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		return printDone(env, cf.output, map[string]any{"name": pos[0], "deleted": true}, fmt.Sprintf("plan %q deleted", pos[0]))
	case "assign":
		if bulk != nil {
			n, err := c.AssignPlansBody(ctx, bulk, csv)
			if err != nil {
				return fail(env, name, err)
			}
			return printDone(env, cf.output, map[string]any{"assigned": n}, fmt.Sprintf("%d keys assigned", n))
		}
		plan := pos[1]
		if plan == "-" {
			plan = ""
		}
		if err := c.AssignPlan(ctx, pos[0], plan); err != nil {
			return fail(env, name, err)
		}
		if plan == "" {
			return printDone(env, cf.output, map[string]any{"key": pos[0], "unassigned": true}, fmt.Sprintf("key %q unassigned", pos[0]))
		}
		return printDone(env, cf.output, map[string]any{"key": pos[0], "plan": plan}, fmt.Sprintf("key %q assigned plan %q", pos[0], plan))
	case "default":
		if len(pos) == 0 {
			_, def, err := c.ListPlans(ctx)
			if err != nil {
				return fail(env, name, err)
			}
			return printDone(env, cf.output, map[string]any{"default": def}, "default plan: "+orNone(def))
		}
		plan := pos[0]
		if plan == "-" {
			plan = ""
		}
		if err := c.SetDefaultPlan(ctx, plan); err != nil {
			return fail(env, name, err)
		}
		return printDone(env, cf.output, map[string]any{"default": plan}, "default plan: "+orNone(plan))
	}
	return ExitOK
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func printDone(env Env, output string, v map[string]any, text string) int {
	if output == "json" {
		printJSON(env.Stdout, v)
	} else {
		fmt.Fprintln(env.Stdout, text)
	}
	return ExitOK
}

func printPlans(env Env, output string, ps []client.Plan, def string, list bool) int {
	if output == "json" {
		switch {
		case list:
			if ps == nil {
				ps = []client.Plan{}
			}
			printJSON(env.Stdout, map[string]any{"plans": ps, "default": def})
		default:
			printJSON(env.Stdout, ps[0])
		}
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "PLAN\tLIMIT\tALGORITHM\tLIMIT\tWINDOW\tBURST")
	for _, p := range ps {
		label := p.Name
		if p.Name == def && def != "" {
			label += " (default)"
		}
		names := make([]string, 0, len(p.Limits))
		for n := range p.Limits {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			l := p.Limits[n]
			win := l.Window
			if l.Calendar != "" {
				win = strings.TrimSpace("calendar " + l.Calendar + " " + l.Timezone)
			}
			burst := "-"
			if l.Burst != 0 {
				burst = fmt.Sprint(l.Burst)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", label, n, l.Algorithm, l.Limit, win, burst)
		}
	}
	tw.Flush()
	return ExitOK
}

// readInput reads a file, or stdin for "-".
func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(stdin, 16<<20))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// readPlanFile reads {"limits": {NAME: {limit}}} from JSON or YAML. Unknown
// fields are refused by name; the server validates the limits.
func readPlanFile(path string, stdin io.Reader) (client.Plan, error) {
	data, err := readInput(path, stdin)
	if err != nil {
		return client.Plan{}, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return client.Plan{}, fmt.Errorf("%s: not a JSON or YAML object: %v", path, err)
	}
	for k := range doc {
		if k != "limits" && k != "name" {
			return client.Plan{}, fmt.Errorf("%s: unknown field %q (a plan has \"limits\")", path, k)
		}
	}
	limits, ok := doc["limits"].(map[string]any)
	if !ok {
		return client.Plan{}, fmt.Errorf("%s: want {\"limits\": {\"NAME\": {\"algorithm\": ..., ...}}}", path)
	}
	p := client.Plan{Limits: map[string]client.Limit{}}
	for n, v := range limits {
		o, ok := v.(map[string]any)
		if !ok {
			return client.Plan{}, fmt.Errorf("%s: limits.%s: want an object", path, n)
		}
		for k := range o {
			if !policyFields[k] || k == "name" || k == "shadow" || k == "local_refusals" || k == "lease" {
				return client.Plan{}, fmt.Errorf("%s: limits.%s: unknown field %q", path, n, k)
			}
		}
		b, _ := json.Marshal(o)
		var l client.Limit
		if err := json.Unmarshal(b, &l); err != nil {
			return client.Plan{}, fmt.Errorf("%s: limits.%s: %v", path, n, err)
		}
		p.Limits[n] = l
	}
	return p, nil
}
