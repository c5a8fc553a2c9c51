package daemon

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/groups"
	"github.com/limitd/limitd/service"
)

// --data-groups: off (the default) is exactly today's process, one Raft
// group on a port of its own; N or auto opens the node's group registry
// (package groups) on one shared Raft port: group 0 plus N data groups.
// It is a bootstrap-time decision recorded in group 0: every node is given
// the same value, and a node whose value differs from the cluster's
// refuses to serve.

type groupsFlags struct {
	dataGroups string
	deadAfter  time.Duration
}

func addGroupsFlags(fs *flag.FlagSet, g *groupsFlags) {
	fs.StringVar(&g.dataGroups, "data-groups", "", "run data groups beside the configuration group, keys split among them by hash slot: a number, or auto (two per node of --bootstrap-expect, two for a single node); chosen at bootstrap, the same on every node; empty: one Raft group, as before")
	fs.DurationVar(&g.deadAfter, "placement-dead-after", groups.DefaultDeadAfter, "with --data-groups: how long group 0's leader goes without hearing from a node before its data group replicas are placed on the other nodes")
}

// count is the data groups asked for (0: off), and the flag's spelling.
func (g groupsFlags) count(bootstrapExpect int) (int, string, error) {
	switch v := g.dataGroups; v {
	case "", "0", "off":
		return 0, "", nil
	case "auto":
		n := bootstrapExpect
		if n < 1 {
			n = 1
		}
		return 2 * n, "auto", nil
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 || strconv.Itoa(n) != v {
			return 0, "", fmt.Errorf("--data-groups %q: want a number from 1 to 64, or auto", v)
		}
		return n, v, nil
	}
}

// openNode opens this node's Raft groups: without --data-groups the one
// cluster.Node as before (host nil); with it the Host over a shared Raft
// port, node being its group 0.
func openNode(f *serveFlags, cfg cluster.Config, bootstrap bool, logger *slog.Logger) (*cluster.Node, *groups.Host, error) {
	n, spelling, err := f.groups.count(f.bootstrapExpect)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		if err := groups.CheckDataDir(cfg.DataDir, false); err != nil {
			return nil, nil, err
		}
		node, err := cluster.Open(cfg, bootstrap)
		return node, nil, err
	}
	id := cfg.NodeID
	if id == "" {
		id = cfg.RaftAddr
	}
	mux, err := raftnet.ListenMux(raftnet.Config{NodeID: id, Addr: cfg.RaftAddr, Bind: cfg.RaftBind, TLS: cfg.TLS},
		hclog.New(&hclog.LoggerOptions{Name: "raft-mux", Level: hclog.Warn}))
	if err != nil {
		return nil, nil, err
	}
	cfg.RaftMux = mux
	h, err := groups.Open(groups.Config{DataGroups: n, Flag: spelling, Base: cfg, Bootstrap: bootstrap, Logger: logger, DeadAfter: f.groups.deadAfter})
	if err != nil {
		mux.Close()
		return nil, nil, err
	}
	return h.Zero(), h, nil
}

// closeNode closes the Host (every group, then the shared port) or the one node.
func closeNode(node *cluster.Node, host *groups.Host) error {
	if host != nil {
		return host.Close()
	}
	return node.Close()
}

// hostFailed is closed when the Host cannot serve; never without one.
func hostFailed(host *groups.Host) <-chan struct{} {
	if host == nil {
		return nil
	}
	return host.Failed()
}

// hostDeps is serviceDeps for a node with data groups: checks, key resets,
// quota leases, the over-limit cache and bans by the group owning the
// key's slot; policies and plans written to every group (groups.Catalog);
// backups of every group in one archive (groups.Host.OpenBackup);
// membership, status and the rest of the configuration from group 0.
func hostDeps(h *groups.Host) service.Deps {
	n, c := h.Zero(), h.Catalog()
	return service.Deps{Node: h, LeaderLocator: h, Leaser: h.Leases(), Refuser: h, Backuper: h,
		Policies: c, Plans: c, Domains: c, Lists: c, Bans: c, Inventory: c, Digester: c, Alerts: c, Degrader: n, Usage: c}
}

// registerNodeMetrics registers the node's collectors: as before without
// data groups; with them every group's, labelled group="g" (the data
// groups' once they open), and limitd_group_leader|term|commit_index|
// applied_index per group (groups.Host.RegisterMetrics).
func registerNodeMetrics(reg prometheus.Registerer, metrics *api.Metrics, node *cluster.Node, host *groups.Host, logger *slog.Logger) {
	if host == nil {
		metrics.Register(node.Collectors()...)
		return
	}
	host.RegisterMetrics(reg, func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) })
}

// crossSlotCollector is limitd_cross_slot_checks_total.
func crossSlotCollector(svc *service.Service) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_cross_slot_checks_total",
		Help: "check/all requests whose keys spanned several hash slots: refused (cross_slot) with --data-groups, decided as one op without."},
		func() float64 { return float64(svc.CrossSlotChecks()) })
}
