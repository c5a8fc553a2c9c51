package fsm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Webhooks: cluster-wide configuration replicated through the log, kept
// beside the policies like the lists (under webhookKeyPrefix in the
// policies bucket, a key no policy name may have), so snapshots, restores
// and the digest cover them. The service validates a webhook before it is
// proposed; apply enforces again what keeps the configuration bounded and
// the delivery loop safe: the name, an http(s) URL of bounded size, a
// bounded secret and at most nodeapi.MaxWebhooks webhooks, so every replica
// refuses the same entries.

// Command types for webhooks (see the list in types.go; never renumber).
const (
	CmdPutWebhook    byte = 50 // name, url, secret → error
	CmdDeleteWebhook byte = 51 // name → error (*Error not_found if absent)
)

const webhookKeyPrefix = "\x00webhook\x00"

// alertCmd is the payload of the alert commands.
type alertCmd struct {
	url, secret string   // CmdPutWebhook
	seqs        []uint64 // CmdAckEvents
}

// EncodePutWebhook builds a CmdPutWebhook entry.
func EncodePutWebhook(w nodeapi.Webhook) []byte {
	dst := appendString([]byte{CmdPutWebhook, cmdVersion}, w.Name)
	return appendString(appendString(dst, w.URL), w.Secret)
}

// EncodeDeleteWebhook builds a CmdDeleteWebhook entry.
func EncodeDeleteWebhook(name string) []byte {
	return appendString([]byte{CmdDeleteWebhook, cmdVersion}, name)
}

func init() {
	for _, typ := range []byte{CmdPutWebhook, CmdDeleteWebhook} {
		registerCommand(typ, commandType{
			name: map[byte]string{CmdPutWebhook: "put webhook", CmdDeleteWebhook: "delete webhook"}[typ],
			decode: func(c *command, d *decoder) {
				c.name = string(d.bytes())
				c.alert.url, c.alert.secret = "", ""
				if c.typ == CmdPutWebhook {
					c.alert.url = string(d.bytes())
					c.alert.secret = string(d.bytes())
				}
			},
			validate: func(c *command) error {
				if e := webhookError(c); e != nil {
					return fmt.Errorf("%w: webhook %q: %v", ErrBadCommand, c.name, e)
				}
				return nil
			},
			apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
				e, err := a.applyWebhook(tx, c)
				return errResponse(e), err
			},
		})
	}
}

func webhookError(c *command) *Error {
	bad := func(f, m string) *Error { return &Error{Code: CodeInvalidArgument, Field: f, Message: m} }
	switch {
	case c.name == "" || len(c.name) > nodeapi.MaxPolicyName:
		return bad("name", fmt.Sprintf("must be 1 to %d bytes", nodeapi.MaxPolicyName))
	case c.typ != CmdPutWebhook:
		return nil
	case len(c.alert.url) > nodeapi.MaxWebhookURL:
		return bad("url", fmt.Sprintf("at most %d bytes", nodeapi.MaxWebhookURL))
	case !strings.HasPrefix(c.alert.url, "http://") && !strings.HasPrefix(c.alert.url, "https://"):
		return bad("url", "must be an http or https URL")
	case len(c.alert.secret) > nodeapi.MaxWebhookSecret:
		return bad("secret", fmt.Sprintf("at most %d bytes", nodeapi.MaxWebhookSecret))
	}
	return nil
}

// applyWebhook applies CmdPutWebhook or CmdDeleteWebhook.
func (a *applier) applyWebhook(tx *persist.Tx, c *command) (*Error, error) {
	if e := webhookError(c); e != nil {
		return e, nil
	}
	t := &a.f.webhooks
	key := webhookKeyPrefix + c.name
	_, exists := t.lookup(c.name)
	if c.typ == CmdDeleteWebhook {
		if !exists {
			return &Error{Code: CodeNotFound, Field: "name", Message: fmt.Sprintf("webhook %q does not exist", c.name)}, nil
		}
		if _, err := tx.DeletePolicy(key); err != nil {
			return nil, err
		}
		t.stage(c.name, nil)
		return nil, nil
	}
	if !exists && t.count() >= nodeapi.MaxWebhooks {
		return &Error{Code: CodeInvalidArgument, Field: "name", Message: fmt.Sprintf("the cluster holds %d webhooks, the most it may", nodeapi.MaxWebhooks)}, nil
	}
	enc := appendString(appendString(nil, c.alert.url), c.alert.secret)
	if err := tx.PutPolicy(key, enc); err != nil {
		return nil, err
	}
	t.stage(c.name, enc)
	return nil, nil
}

// loadWebhook takes a policies-bucket entry that is a webhook; false otherwise.
func loadWebhook(into map[string][]byte, key string, enc []byte) bool {
	name, ok := strings.CutPrefix(key, webhookKeyPrefix)
	if ok {
		into[name] = bytes.Clone(enc)
	}
	return ok
}

// checkWebhooks refuses a loaded webhook record that does not decode:
// damaged configuration is refused, never served.
func checkWebhooks(m map[string][]byte) error {
	for name, enc := range m {
		if _, ok := decodeWebhook(name, enc); !ok {
			return fmt.Errorf("webhook %q: %w: malformed record", name, persist.ErrCorrupt)
		}
	}
	return nil
}

func decodeWebhook(name string, enc []byte) (nodeapi.Webhook, bool) {
	d := decoder{b: enc}
	u, s := string(d.bytes()), string(d.bytes())
	return nodeapi.Webhook{Name: name, URL: u, Secret: s}, d.err == nil && d.off == len(enc)
}

// Webhooks returns this replica's webhooks, secrets included (the delivery
// loop signs with them; the service never returns them), sorted by name.
// A record that does not decode is left out: it cannot be delivered to.
func (f *FSM) Webhooks() []nodeapi.Webhook {
	f.webhooks.mu.RLock()
	ws := make([]nodeapi.Webhook, 0, len(f.webhooks.m))
	for name, enc := range f.webhooks.m {
		if w, ok := decodeWebhook(name, enc); ok {
			ws = append(ws, w)
		}
	}
	f.webhooks.mu.RUnlock()
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	return ws
}
