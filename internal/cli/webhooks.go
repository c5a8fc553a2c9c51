package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/limitd/limitd/client"
)

const webhookUsage = `Usage: limitd webhook put|get|list|delete [flags] [NAME]

  put NAME --url URL       create or replace a webhook (admin): events (a
                           policy's notify thresholds crossed, bans) are
                           POSTed to URL, signed with the secret, read from
                           --secret-file (- for stdin) or LIMITD_WEBHOOK_SECRET
                           (never a flag: a process list would show it)
  get NAME                 show a webhook (admin; never its secret)
  list                     show every webhook (admin)
  delete NAME              delete a webhook (admin)

Example:
  printf %s "$SECRET" | limitd webhook put ops --url https://hooks.example/limitd --secret-file -
  limitd webhook list

Flags:
`

func runWebhook(args []string, env Env) int {
	var cf connFlags
	var u, secretFile string
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.StringVar(&u, "url", "", "put: the http or https URL events are POSTed to")
	fs.StringVar(&secretFile, "secret-file", "", "put: a file holding the signing secret, 16 to 256 bytes (- for stdin; default $LIMITD_WEBHOOK_SECRET)")
	cf.register(fs)
	sub, pos, code, ok := parseSubcommand(env, "webhook", webhookUsage, fs, args, "put", "get", "list", "delete")
	if !ok {
		return code
	}
	name := "webhook " + sub
	if err := cf.validate(env); err != nil {
		return usageError(env, name, "%v", err)
	}
	want := 1
	if sub == "list" {
		want = 0
	}
	if len(pos) != want {
		return usageError(env, name, "want %d argument(s), got %d", want, len(pos))
	}
	var put client.Webhook
	if sub == "put" {
		if u == "" {
			return usageError(env, name, "--url is required")
		}
		secret := env.Getenv("LIMITD_WEBHOOK_SECRET")
		if secretFile != "" {
			var r io.Reader = os.Stdin
			if secretFile != "-" {
				fh, err := os.Open(secretFile)
				if err != nil {
					return usageError(env, name, "--secret-file: %v", err)
				}
				defer fh.Close()
				r = fh
			}
			b, err := io.ReadAll(io.LimitReader(r, 4096))
			if err != nil {
				return usageError(env, name, "--secret-file: %v", err)
			}
			secret = strings.TrimRight(string(b), "\r\n")
		}
		if secret == "" {
			return usageError(env, name, "the secret is required: --secret-file or LIMITD_WEBHOOK_SECRET")
		}
		put = client.Webhook{Name: pos[0], URL: u, Secret: secret}
	}
	c, ctx, done, err := cf.dial()
	if err != nil {
		return usageError(env, name, "%v", err)
	}
	defer done()
	var out []client.Webhook
	switch sub {
	case "put":
		w, err := c.PutWebhook(ctx, put)
		if err != nil {
			return fail(env, name, err)
		}
		out = []client.Webhook{w}
	case "get":
		w, err := c.GetWebhook(ctx, pos[0])
		if err != nil {
			return fail(env, name, err)
		}
		out = []client.Webhook{w}
	case "list":
		if out, err = c.ListWebhooks(ctx); err != nil {
			return fail(env, name, err)
		}
	case "delete":
		if err := c.DeleteWebhook(ctx, pos[0]); err != nil {
			return fail(env, name, err)
		}
		if cf.output == "json" {
			printJSON(env.Stdout, map[string]any{"name": pos[0], "deleted": true})
		} else {
			fmt.Fprintf(env.Stdout, "webhook %q deleted\n", pos[0])
		}
		return ExitOK
	}
	if cf.output == "json" {
		if sub == "list" {
			if out == nil {
				out = []client.Webhook{}
			}
			printJSON(env.Stdout, map[string]any{"webhooks": out})
		} else {
			printJSON(env.Stdout, out[0])
		}
		return ExitOK
	}
	tw := newTable(env.Stdout)
	fmt.Fprintln(tw, "NAME\tURL")
	for _, w := range out {
		fmt.Fprintf(tw, "%s\t%s\n", w.Name, w.URL)
	}
	tw.Flush()
	return ExitOK
}

// notifyFlag is policy put's --notify: thresholds, comma separated (the
// server validates them and names the one at fault).
type notifyFlag []float64

func (n *notifyFlag) String() string {
	s := make([]string, len(*n))
	for i, f := range *n {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func (n *notifyFlag) Set(v string) error {
	*n = (*n)[:0]
	for _, p := range strings.Split(v, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", p)
		}
		*n = append(*n, f)
	}
	return nil
}
