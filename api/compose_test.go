package api

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/service"
)

// testNode is what the tests' nodes are (the fakes here, which provide every
// service capability, or a cluster.Node): the API's Store, with the node-to-node endpoints
// and the collectors a cluster.Node has.
type testNode interface {
	Store
	Internal() http.Handler
	Collectors() []prometheus.Collector
}

// testAPI is the HTTP API composed over a node as internal/daemon composes
// it over cluster.Node: one registry, one service whose Observer is the
// API's metrics, the node's collectors on the registry, and the node's
// /internal/ endpoints served beside the API on the same handler (counted
// as route "internal").
type testAPI struct {
	*Server
	svc *service.Service
	h   http.Handler
}

// Handler is the listener's handler: the API and /internal/.
func (a *testAPI) Handler() http.Handler { return a.h }

func (a *testAPI) Service() *service.Service { return a.svc }

// newAPI composes the API over n; sc, when given, configures the service
// (its batch bound and request timeout).
func newAPI(n testNode, cfg Config, sc ...service.Config) *testAPI {
	var svcCfg service.Config
	if len(sc) > 0 {
		svcCfg = sc[0]
	}
	m := NewMetrics(prometheus.NewRegistry(), svcCfg.RequestTimeout, cfg.Logger)
	svcCfg.Observer = m
	svc := service.New(depsOf(n), svcCfg)
	m.Register(n.Collectors()...)
	srv := New(svc, n, m, cfg)
	public, internal := srv.Handler(), m.Instrument(n.Internal())
	return &testAPI{Server: srv, svc: svc, h: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/internal/") {
			internal.ServeHTTP(w, req)
			return
		}
		public.ServeHTTP(w, req)
	})}
}

// depsOf is a cluster node's capabilities as internal/daemon wires them,
// or a fake's, which provides every one itself.
func depsOf(n testNode) service.Deps {
	if cn, ok := n.(*cluster.Node); ok {
		return clustertest.ServiceDeps(cn)
	}
	return service.DepsOf(n.(service.Everything))
}
