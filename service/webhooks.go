package service

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/limitd/limitd/nodeapi"
)

// Webhooks: receivers of the cluster's events (events.go), cluster-wide
// configuration replicated through the log beside the policies. Only the
// delivery loop (package webhook) reads a webhook's secret: no read of
// the service returns it.

// Alerts is the Node's webhooks and event outbox.
type Alerts interface {
	// PutWebhook stores a webhook through the leader. Errors as Node's.
	PutWebhook(ctx context.Context, w nodeapi.Webhook) error
	// DeleteWebhook deletes a webhook through the leader; *nodeapi.Error
	// not_found when it does not exist.
	DeleteWebhook(ctx context.Context, name string) error
	// Webhooks is this replica's webhooks, sorted by name.
	Webhooks() []nodeapi.Webhook
	// Outbox is up to limit events of this replica's outbox after seq, in order.
	Outbox(after uint64, limit int) []nodeapi.Event
	// SubscribeEvents hands ch every event this replica applies from now
	// on, unless ch is full; cancel stops it.
	SubscribeEvents(ch chan<- nodeapi.Event) (cancel func())
}

// Bounds of the webhooks' API.
const (
	MinWebhookSecret = 16 // bytes: a shorter HMAC key is a guessable one
	// MaxEventStreams bounds the GET /v1/events streams a node serves at
	// once: each holds a goroutine and a buffer.
	MaxEventStreams = 64
)

// WebhookRequest is a webhook as a client gives it.
type WebhookRequest struct {
	Name   string `json:"-"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// WebhookView is a webhook as a read returns it: never its secret.
type WebhookView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// ValidateWebhook checks r: the name like a policy's, an absolute http or
// https URL with a host and no credentials, at most nodeapi.MaxWebhookURL
// bytes, and a secret of MinWebhookSecret to nodeapi.MaxWebhookSecret
// bytes. Errors name "name", "url" or "secret".
func ValidateWebhook(r WebhookRequest) (nodeapi.Webhook, *Error) {
	if e := ValidatePolicyName(r.Name, "name"); e != nil {
		return nodeapi.Webhook{}, e
	}
	if len(r.URL) == 0 || len(r.URL) > nodeapi.MaxWebhookURL {
		return nodeapi.Webhook{}, Invalid("url", "required, at most "+strconv.Itoa(nodeapi.MaxWebhookURL)+" bytes")
	}
	u, err := url.Parse(r.URL)
	switch {
	case err != nil:
		return nodeapi.Webhook{}, Invalid("url", "not a URL: "+err.Error())
	case u.Scheme != "http" && u.Scheme != "https":
		return nodeapi.Webhook{}, Invalid("url", "must be an http or https URL, got scheme "+strconv.Quote(u.Scheme))
	case u.Host == "" || u.Hostname() == "":
		return nodeapi.Webhook{}, Invalid("url", "needs a host")
	case u.User != nil:
		return nodeapi.Webhook{}, Invalid("url", "must not carry credentials (reads return the URL; the secret signs each POST)")
	case u.Fragment != "":
		return nodeapi.Webhook{}, Invalid("url", "must not have a fragment")
	}
	if len(r.Secret) < MinWebhookSecret || len(r.Secret) > nodeapi.MaxWebhookSecret {
		return nodeapi.Webhook{}, Invalid("secret", "must be "+strconv.Itoa(MinWebhookSecret)+" to "+strconv.Itoa(nodeapi.MaxWebhookSecret)+" bytes")
	}
	return nodeapi.Webhook{Name: r.Name, URL: r.URL, Secret: r.Secret}, nil
}

// PutWebhook validates and stores a webhook through the leader.
func (s *Service) PutWebhook(ctx context.Context, r WebhookRequest) (WebhookView, *Error) {
	w, e := ValidateWebhook(r)
	if e != nil {
		return WebhookView{}, e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := s.deps.Alerts.PutWebhook(ctx, w); err != nil {
		return WebhookView{}, s.nodeError(err)
	}
	return WebhookView{Name: w.Name, URL: w.URL}, nil
}

// GetWebhook returns this replica's copy of a webhook, without its secret.
func (s *Service) GetWebhook(name string) (WebhookView, *Error) {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return WebhookView{}, e
	}
	for _, w := range s.deps.Alerts.Webhooks() {
		if w.Name == name {
			return WebhookView{Name: w.Name, URL: w.URL}, nil
		}
	}
	return WebhookView{}, &Error{Code: CodeNotFound, Field: "name", Message: "webhook " + strconv.Quote(name) + " does not exist"}
}

// ListWebhooks returns this replica's webhooks by name, without secrets.
func (s *Service) ListWebhooks() []WebhookView {
	ws := s.deps.Alerts.Webhooks()
	out := make([]WebhookView, 0, len(ws))
	for _, w := range ws {
		out = append(out, WebhookView{Name: w.Name, URL: w.URL})
	}
	return out
}

// DeleteWebhook deletes a webhook through the leader.
func (s *Service) DeleteWebhook(ctx context.Context, name string) *Error {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	return s.nodeError(s.deps.Alerts.DeleteWebhook(ctx, name))
}

// eventStreams is each Service's open event streams: *Service → *streamSet.
var eventStreams sync.Map

// streamSet counts a Service's event streams (MaxEventStreams) and ends
// them all at shutdown.
type streamSet struct {
	count  atomic.Int64
	closed chan struct{}
	once   sync.Once
}

func (s *Service) streams() *streamSet {
	c, _ := eventStreams.LoadOrStore(s, &streamSet{closed: make(chan struct{})})
	return c.(*streamSet)
}

// CloseEventStreams ends every event stream, open or to come (shutdown):
// an HTTP server's graceful shutdown waits for its requests, and a stream
// never ends by itself.
func (s *Service) CloseEventStreams() {
	set := s.streams()
	set.once.Do(func() { close(set.closed) })
}

// EventStream is one subscriber's view of this replica's events: the
// events still in the outbox after a resume point, then every event
// applied from the subscription on (a slow reader misses what overflowed
// its buffer; it may resume from the outbox with the last id it got).
type EventStream struct {
	C <-chan nodeapi.Event
	// Done is closed when the node shuts down: the stream must end.
	Done   <-chan struct{}
	cancel func()
	set    *streamSet
}

// Close ends the stream.
func (st *EventStream) Close() {
	st.cancel()
	st.set.count.Add(-1)
}

// SubscribeEvents opens an event stream, refused (unavailable) past
// MaxEventStreams; the backlog is the outbox's events after seq
// (Last-Event-ID), none when seq is 0.
func (s *Service) SubscribeEvents(after uint64) (*EventStream, []nodeapi.Event, *Error) {
	set := s.streams()
	if set.count.Add(1) > MaxEventStreams {
		set.count.Add(-1)
		return nil, nil, &Error{Code: CodeUnavailable, Message: "this node serves " + strconv.Itoa(MaxEventStreams) + " event streams, the most it may"}
	}
	ch := make(chan nodeapi.Event, 256)
	cancel := s.deps.Alerts.SubscribeEvents(ch)
	var backlog []nodeapi.Event
	if after > 0 {
		backlog = s.deps.Alerts.Outbox(after, nodeapi.MaxOutbox)
	}
	return &EventStream{C: ch, Done: set.closed, cancel: cancel, set: set}, backlog, nil
}
