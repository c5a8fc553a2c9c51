package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/limitd/limitd/client"
)

const listUsage = `Usage: limitd list put|get|ls|delete [flags] [NAME]

  put NAME --file FILE     create or replace a whole list (admin) from a JSON
                           file (- for stdin): {"kind": "allow"|"deny",
                           "entries": [{"key": "..."}, {"prefix": "..."},
                           {"cidr": "...", "expires": "RFC 3339"}],
                           "policies": ["..."]}
  put NAME --kind K --key K1 --prefix P1 --cidr C1 [--policy P]
                           the same from flags (each repeatable)
  get NAME                 show a list (admin; --output json exports it in
                           the form put --file reads)
  ls                       show every list (admin)
  delete NAME              delete a list (admin)

Example:
  limitd list put blocked --kind deny --cidr 192.0.2.0/24 --key scraper-7
  limitd list put vip --kind allow --prefix vip- --policy api
  limitd list get blocked --output json > blocked.json
  limitd list put blocked --file blocked.json

Flags:
`

const bansUsage = `Usage: limitd bans ls|delete [flags] [KEY]

  ls                       show the bans in force (admin), --limit per page,
                           every page unless --cursor is given
  delete KEY               lift a key's bans and forget its offences (admin),
                           under --policy only when given

Flags:
`

// banFlags are policy put's --ban flags: --ban gives the policy an
// on_exceed option.
type banFlags struct {
	ban, escalate, forget string
}

func (b *banFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.ban, "ban", "", "put: on_exceed: ban a key the policy refuses for this long (e.g. 10m; docs/API.md, Bans)")
	fs.StringVar(&b.escalate, "ban-escalate", "", "put: on_exceed: the bans of further offences, comma separated and increasing (e.g. 1h,24h)")
	fs.StringVar(&b.forget, "ban-forget-after", "", "put: on_exceed: forget offences this long after the last ban ended (default the longest ban)")
}

func (b *banFlags) given() bool { return b.ban != "" || b.escalate != "" || b.forget != "" }

func (b *banFlags) onExceed() *client.OnExceed {
	if !b.given() {
		return nil
	}
	o := &client.OnExceed{Ban: b.ban, ForgetAfter: b.forget}
	if b.escalate != "" {
		o.Escalate = strings.Split(b.escalate, ",")
	}
	return o
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func runList(args []string, env Env) int {
	var cf connFlags
	var file, kind string
	var keys, prefixes, cidrs, policies multi
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.StringVar(&file, "file", "", "put: JSON file of the list (- for stdin)")
	fs.StringVar(&kind, "kind", "", "put: allow or deny")
	fs.Var(&keys, "key", "put: an exact key entry (repeatable)")
	fs.Var(&prefixes, "prefix", "put: a key prefix entry (repeatable)")
	fs.Var(&cidrs, "cidr", "put: a CIDR entry, for addresses forward-auth derives (repeatable)")
	fs.Var(&policies, "policy", "put: apply the list under this policy only (repeatable; default every policy)")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "list", listUsage, fs, args, "put", "get", "ls", "delete")
	if !ok {
		return code
	}
	name := "list " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	want := 1
	if sub == "ls" {
		want = 0
	}
	if len(pos) != want {
		return usageError(env, name, "want %d argument(s), got %d", want, len(pos))
	}
	var put client.List
	if sub == "put" {
		if file != "" {
			if kind != "" || len(keys)+len(prefixes)+len(cidrs)+len(policies) > 0 {
				return usageError(env, name, "give --file or entry flags, not both")
			}
			var r io.Reader = os.Stdin
			if file != "-" {
				fh, err := os.Open(file)
				if err != nil {
					return usageError(env, name, "%v", err)
				}
				defer fh.Close()
				r = fh
			}
			dec := json.NewDecoder(r)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&put); err != nil {
				return usageError(env, name, "%s: %v", file, err)
			}
		} else {
			put = client.List{Kind: kind, Policies: policies, Entries: []client.ListEntry{}}
			for _, k := range keys {
				put.Entries = append(put.Entries, client.ListEntry{Key: k})
			}
			for _, p := range prefixes {
				put.Entries = append(put.Entries, client.ListEntry{Prefix: p})
			}
			for _, c := range cidrs {
				put.Entries = append(put.Entries, client.ListEntry{CIDR: c})
			}
		}
		put.Name = pos[0]
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	var out []client.List
	switch sub {
	case "put":
		l, err := c.PutList(ctx, put)
		if err != nil {
			return fail(env, name, err)
		}
		out = []client.List{l}
	case "get":
		l, err := c.GetList(ctx, pos[0])
		if err != nil {
			return fail(env, name, err)
		}
		out = []client.List{l}
	case "ls":
		if out, err = c.ListLists(ctx); err != nil {
			return fail(env, name, err)
		}
	case "delete":
		if err := c.DeleteList(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]any{"name": pos[0], "deleted": true})
		} else {
			fmt.Fprintf(env.Stdout, "list %q deleted\n", pos[0])
		}
		return ExitOK
	}
	if cf.output == "json" {
		if sub == "ls" {
			if out == nil {
				out = []client.List{}
			}
			printJSON(env.Stdout, map[string]any{"lists": out})
		} else {
			printJSON(env.Stdout, out[0])
		}
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tENTRIES\tPOLICIES")
	for _, l := range out {
		ps := strings.Join(l.Policies, ",")
		if ps == "" {
			ps = "(all)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Name, l.Kind, len(l.Entries), ps)
	}
	tw.Flush()
	if sub == "get" && len(out) == 1 {
		tw = newTable(env.Stdout)
		fmt.Fprintln(tw, "\nTYPE\tVALUE\tEXPIRES")
		for _, e := range out[0].Entries {
			typ, v := "key", e.Key
			switch {
			case e.Prefix != "":
				typ, v = "prefix", e.Prefix
			case e.CIDR != "":
				typ, v = "cidr", e.CIDR
			}
			exp := e.Expires
			if exp == "" {
				exp = "never"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", typ, v, exp)
		}
		tw.Flush()
	}
	return ExitOK
}

func runBans(args []string, env Env) int {
	var cf connFlags
	var limit int
	var cursor, policy string
	fs := flag.NewFlagSet("bans", flag.ContinueOnError)
	fs.IntVar(&limit, "limit", 0, "ls: bans per page (default the server's, 100)")
	fs.StringVar(&cursor, "cursor", "", "ls: start after this page (next_cursor of the one before); only that page")
	fs.StringVar(&policy, "policy", "", "delete: lift the ban under this policy only")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "bans", bansUsage, fs, args, "ls", "delete")
	if !ok {
		return code
	}
	name := "bans " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	want := 0
	if sub == "delete" {
		want = 1
	}
	if len(pos) != want {
		return usageError(env, name, "want %d argument(s), got %d", want, len(pos))
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	if sub == "delete" {
		if err := c.Unban(ctx, pos[0], policy); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]any{"key": pos[0], "unbanned": true})
		} else {
			fmt.Fprintf(env.Stdout, "key %q unbanned\n", pos[0])
		}
		return ExitOK
	}
	var all []client.Ban
	next := cursor
	for {
		page, n, err := c.Bans(ctx, limit, next)
		if err != nil {
			return fail(env, name, err)
		}
		all = append(all, page...)
		next = n
		if next == "" || cursor != "" {
			break
		}
	}
	if cf.output == "json" {
		if all == nil {
			all = []client.Ban{}
		}
		out := map[string]any{"bans": all}
		if cursor != "" && next != "" {
			out["next_cursor"] = next
		}
		printJSON(env.Stdout, out)
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "KEY\tPOLICY\tUNTIL\tOFFENCES")
	for _, b := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", b.Key, b.Policy, b.Until.UTC().Format(time.RFC3339), b.Offences)
	}
	tw.Flush()
	if cursor != "" && next != "" {
		fmt.Fprintf(env.Stdout, "next page: --cursor %s\n", next)
	}
	return ExitOK
}
