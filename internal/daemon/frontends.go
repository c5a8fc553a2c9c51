package daemon

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/groups"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/webhook"
)

// frontEnds is everything serve builds over the node, once: one Prometheus
// registry and one service.Service, handed to the HTTP API and the gRPC
// server, so that every front end shares one set of limits, caches, leases
// and check metrics (limitd_checks_total counts gRPC's checks too), and
// /metrics serves the node's, the HTTP API's and the RLS metrics from the
// one registry.
type frontEnds struct {
	svc *service.Service
	rls *rlsFrontEnd // gRPC, POST /json, --rls-config (grpc.go)
	// handler is the HTTP listener's: the API, POST /json and the
	// cluster's node-to-node endpoints under /internal/.
	handler http.Handler
	config  *configMetrics // the config watcher's and xDS's counters (watch.go)
	// alerts delivers the outbox's events to the webhooks while this node
	// leads (package webhook); serve runs it.
	alerts *webhook.Loop
}

// newFrontEnds composes the front ends over node. The API's metrics come
// first: they are the service's Observer.
func newFrontEnds(f *serveFlags, in *startInputs, node *cluster.Node, host *groups.Host, apiCfg api.Config, logger *slog.Logger) (*frontEnds, error) {
	reg := prometheus.NewRegistry()
	metrics := api.NewMetrics(reg, f.applyTimeout, apiCfg.Logger)
	registerNodeMetrics(reg, metrics, node, host, logger) // raft, batcher, storage; per group with data groups (groups.go)
	deps, internal := serviceDeps(node), node.Internal()
	var slots service.SlotsSource
	if host != nil { // groups.go: checks routed by slot to the data groups
		deps, internal, slots = hostDeps(host), host.Internal(), host
	}
	svc := service.New(deps, service.Config{
		MaxBatch: f.maxBatch,
		// One deadline for a request, end to end: the cluster answers within
		// it (its batcher and proposals watch the request's context and say
		// whether anything was proposed when it ends).
		RequestTimeout: f.applyTimeout,
		Observer:       metrics,
		// Inline limits' bounds (bounds.go), for every front end alike.
		MaxInlineWindow: f.bounds.maxInlineWindow,
		NoInlineLimits:  f.bounds.noInlineLimits,
		RefuseCrossSlot: host != nil,
		Slots:           slots,
	})
	metrics.Register(crossSlotCollector(svc))
	rlsFE, err := newRLSFrontEnd(f, in, svc, logger)
	if err != nil {
		return nil, err
	}
	metrics.Register(rlsFE.srv.Collectors()...)
	config := newConfigMetrics()
	metrics.Register(config.collectors()...)
	metrics.Register(api.DegradedCollectors(svc)...) // degraded mode's figures
	srv := api.New(svc, node, metrics, apiCfg)
	alerts := webhook.New(node.Deliveries(), webhook.Config{Logger: logger.With("component", "webhook")})
	metrics.Register(alerts.Collectors()...)
	return &frontEnds{svc: svc, rls: rlsFE, config: config, alerts: alerts,
		handler: listenerHandler(srv.Handler(), rlsFE.srv.JSONHandler(), metrics.Instrument(internal))}, nil
}

// listenerHandler serves the HTTP port: envoy ratelimit's POST /json, the
// cluster's node-to-node endpoints (their own handler, counted in the
// API's response metrics as route "internal"), and the public API for
// everything else. Not an http.ServeMux: it would redirect key paths it
// deems unclean ("/v1/keys/a//b").
func listenerHandler(public, json, internal http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/json":
			json.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/internal/"):
			internal.ServeHTTP(w, r)
		default:
			public.ServeHTTP(w, r)
		}
	})
}

// serviceDeps is every capability the service uses, from the cluster type
// that provides it (service.Deps; each checked in cluster/consumers_test.go):
// the node itself (checks, membership, status, leases, the leader hint), its
// Catalog (policies, plans, lists, bans, RLS domains, the inventory, the
// digest), its OverLimit (the over-limit cache) and its backup Taker.
func serviceDeps(n *cluster.Node) service.Deps {
	c := n.Catalog()
	return service.Deps{Node: n, LeaderLocator: n, Leaser: n, Refuser: n.OverLimit(), Backuper: n.Backups(),
		Policies: c, Plans: c, Domains: c, Lists: c, Bans: c, Inventory: c, Digester: c, Alerts: c, Degrader: n, Usage: c}
}
