package nodeapi

// Alerts: a limit's notify thresholds, the outbox of events they produce
// and the webhooks the events are delivered to (fsm/notify.go,
// fsm/outbox.go, fsm/webhooks.go; the delivery loop is package webhook).

// Bounds on alerts, the one source for each: the state machine refuses
// past them at apply, the service before.
const (
	MaxNotify   = 4     // thresholds on one limit
	NotifyScale = 10000 // a threshold's unit: parts per NotifyScale of the limit

	// MaxOutbox bounds the events waiting for delivery, cluster-wide. An
	// event past it is dropped (counted, never stored): a webhook that is
	// down for long must not grow the replicated state without bound.
	MaxOutbox = 10000
	// MaxEventAgeNs is how long an event waits in the outbox at most
	// (leader time): past it the expiry sweep drops it, counted, whether
	// or not every webhook has it.
	MaxEventAgeNs = int64(24 * 3600 * 1e9)
	// MaxAck bounds the event ids of one ack entry.
	MaxAck = 256

	MaxWebhooks      = 16   // webhooks in the cluster
	MaxWebhookURL    = 2048 // bytes of a webhook's URL
	MaxWebhookSecret = 256  // bytes of a webhook's secret
)

// Event is one alert or ban event as the outbox holds it: ID is stable (a
// redelivery carries the same one), Body the JSON object POSTed to every
// webhook and streamed by GET /v1/events.
type Event struct {
	Seq  uint64 // the event's place in the outbox: its order, and what an ack names
	ID   string
	At   int64 // leader time the event was decided at (Unix ns)
	Body []byte
}

// Webhook is a registered receiver of events. Secret signs each POST
// (HMAC-SHA256 of the body); it is never returned by a read of the API.
type Webhook struct {
	Name   string
	URL    string
	Secret string
}
