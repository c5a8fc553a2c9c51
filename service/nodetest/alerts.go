package nodetest

import (
	"context"

	"github.com/limitd/limitd/nodeapi"
)

// A node without alerts: no webhooks, an empty outbox, no events.

func (NoCapabilities) PutWebhook(context.Context, nodeapi.Webhook) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no webhooks"}
}
func (NoCapabilities) DeleteWebhook(context.Context, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no webhooks"}
}
func (NoCapabilities) Webhooks() []nodeapi.Webhook                          { return nil }
func (NoCapabilities) Outbox(uint64, int) []nodeapi.Event                   { return nil }
func (NoCapabilities) SubscribeEvents(chan<- nodeapi.Event) (cancel func()) { return func() {} }
