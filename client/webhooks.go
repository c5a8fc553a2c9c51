package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// Webhook receives the cluster's events — a policy's notify thresholds
// crossed, bans (docs/API.md, "Alerts"). Secret signs each POST; it is
// write-only: GetWebhook and ListWebhooks leave it empty.
type Webhook struct {
	Name   string `json:"name,omitempty"`
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// Headers of a delivery, for receivers.
const (
	WebhookSignatureHeader = "X-Limitd-Signature" // "sha256=" + hex HMAC-SHA256(secret, body)
	WebhookEventIDHeader   = "X-Limitd-Event-Id"  // the event's stable id: dedupe on it
)

// VerifyWebhook reports whether a delivery's body carries the signature
// (its X-Limitd-Signature header) of secret, in constant time. A receiver
// must verify before trusting a delivery, and dedupe on the event id: a
// delivery may arrive more than once.
func VerifyWebhook(secret string, body []byte, signature string) bool {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hmac.Equal([]byte("sha256="+hex.EncodeToString(m.Sum(nil))), []byte(signature))
}

// PutWebhook creates or replaces a webhook (admin); the answer has no secret.
func (c *Client) PutWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	if w.Name == "" {
		return Webhook{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: "name", Message: "is required"}
	}
	name := w.Name
	w.Name = ""
	body, err := json.Marshal(w)
	if err != nil {
		return Webhook{}, fmt.Errorf("limitd: encode webhook: %w", err)
	}
	var out Webhook
	err = c.call(ctx, http.MethodPut, "/v1/webhooks/"+url.PathEscape(name), body, true, true, &out)
	return out, err
}

// GetWebhook returns a webhook without its secret (admin).
func (c *Client) GetWebhook(ctx context.Context, name string) (Webhook, error) {
	var out Webhook
	err := c.call(ctx, http.MethodGet, "/v1/webhooks/"+url.PathEscape(name), nil, true, true, &out)
	return out, err
}

// ListWebhooks returns every webhook sorted by name, without secrets (admin).
func (c *Client) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	var out struct {
		Webhooks []Webhook `json:"webhooks"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/webhooks", nil, true, true, &out)
	return out.Webhooks, err
}

// DeleteWebhook deletes a webhook (admin).
func (c *Client) DeleteWebhook(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(name), nil, true, true, nil)
}
