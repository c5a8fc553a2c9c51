package grpcapi

import (
	"context"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Webhooks: translation only (service/webhooks.go); every method is admin
// (adminMethods), and no answer carries a secret.

func webhookProto(v service.WebhookView) *limitdv1.Webhook {
	return &limitdv1.Webhook{Name: v.Name, Url: v.URL}
}

func (l *limitdServer) PutWebhook(ctx context.Context, req *limitdv1.PutWebhookRequest) (*limitdv1.Webhook, error) {
	w := req.GetWebhook()
	v, e := l.svc().PutWebhook(ctx, service.WebhookRequest{Name: w.GetName(), URL: w.GetUrl(), Secret: w.GetSecret()})
	if e != nil {
		return nil, toStatus(e.Under("webhook"))
	}
	return webhookProto(v), nil
}

func (l *limitdServer) GetWebhook(ctx context.Context, req *limitdv1.GetWebhookRequest) (*limitdv1.Webhook, error) {
	v, e := l.svc().GetWebhook(req.GetName())
	if e != nil {
		return nil, toStatus(e)
	}
	return webhookProto(v), nil
}

func (l *limitdServer) ListWebhooks(ctx context.Context, _ *limitdv1.ListWebhooksRequest) (*limitdv1.ListWebhooksResponse, error) {
	ws := l.svc().ListWebhooks()
	out := &limitdv1.ListWebhooksResponse{Webhooks: make([]*limitdv1.Webhook, len(ws))}
	for i, w := range ws {
		out.Webhooks[i] = webhookProto(w)
	}
	return out, nil
}

func (l *limitdServer) DeleteWebhook(ctx context.Context, req *limitdv1.DeleteWebhookRequest) (*limitdv1.DeleteWebhookResponse, error) {
	if e := l.svc().DeleteWebhook(ctx, req.GetName()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeleteWebhookResponse{}, nil
}
