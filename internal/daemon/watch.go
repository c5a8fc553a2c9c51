package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// Watched configuration files: --policies and --rls-config are applied at
// start and again whenever their content changes.
//
// Change detection polls content hashes rather than using inotify: a
// Kubernetes ConfigMap volume changes by swapping its "..data" symlink, which
// an inotify watch on the file (or the file's old target) never sees, and
// polling a hash handles that, editors that write a new file and rename it,
// and network file systems alike, with no new dependency (fsnotify is not
// one). A config is a few files, so reading them every --config-watch-interval
// costs nothing worth measuring.
//
// Who applies: policies and RLS domains are replicated state, and every node
// watches its own copy of the files. A node applies its file when its content
// changes (and once at start), writing through the leader (a follower's
// writes are forwarded). Only items that differ from this replica's copy are
// written, so nodes given the same file converge with one write per changed
// item (or a few identical ones, when nodes see the change before the
// first write reaches them: the same content, so harmless), and a node whose file has not changed writes nothing: a node that
// sees a ConfigMap update late does not undo anything, it finds it applied.

// DefaultConfigWatchInterval is --config-watch-interval.
const DefaultConfigWatchInterval = 2 * time.Second

// watchFlags are --config-watch-interval and --config-prune.
type watchFlags struct {
	interval time.Duration
	prune    bool
	xds      xdsFlags // xds.go
}

func addWatchFlags(fs *flag.FlagSet, w *watchFlags) {
	fs.DurationVar(&w.interval, "config-watch-interval", DefaultConfigWatchInterval, "how often --policies and --rls-config are read again (content hashes: Kubernetes ConfigMap symlink swaps included); a change is validated whole and applied through the leader, a bad one logged, counted in limitd_config_reload_errors_total and not applied; 0: read at start only")
	fs.BoolVar(&w.prune, "config-prune", false, "the --policies file and the --rls-config domains (or the --rls-xds-server's) are the whole set: delete stored policies and domains they do not name, including ones created through the API (default: files add and replace, never delete)")
	addXDSFlags(fs, &w.xds)
}

// checkWatchFlags checks the flags of this file and xds.go at start.
func checkWatchFlags(f *serveFlags) error {
	if f.watch.interval < 0 {
		return fmt.Errorf("--config-watch-interval %v: must not be negative (0: read the files at start only)", f.watch.interval)
	}
	return checkXDSFlags(f)
}

// configTarget is what the watcher writes to: *service.Service. An interface
// so the watcher's tests need no cluster.
type configTarget interface {
	PutPolicies(ctx context.Context, policies []fsm.Policy, retry time.Duration) error
	ListPolicies() []fsm.Policy
	DeletePolicy(ctx context.Context, name string) *service.Error
	LoadRLSDomains(ctx context.Context, domains []*rls.Domain) error
	RLSDomains() ([]fsm.Domain, *service.Error)
	DeleteRLSDomain(ctx context.Context, name string) *service.Error
}

// configMetrics are the reload counters on /metrics, labelled by source
// ("policies", "rls_config", "rls_xds").
type configMetrics struct {
	errors  *prometheus.CounterVec
	reloads *prometheus.CounterVec
}

func newConfigMetrics() *configMetrics {
	return &configMetrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_config_reload_errors_total",
			Help: "Configuration versions refused (invalid, or refused by the cluster) by source: policies (--policies), rls_config (--rls-config), rls_xds (--rls-xds-server); the running configuration was kept.",
		}, []string{"source"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_config_reloads_total",
			Help: "Configuration versions applied by source (policies, rls_config, rls_xds), the one read at start included.",
		}, []string{"source"}),
	}
}

func (m *configMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.errors, m.reloads}
}

// Sources, the metrics' label values.
const (
	sourcePolicies  = "policies"
	sourceRLSConfig = "rls_config"
	sourceRLSXDS    = "rls_xds"
)

// watchedFile is one watched input: its flag (for messages), its path, and
// how to validate and apply its content.
type watchedFile struct {
	flag, source, path string
	// load reads and validates the whole input, returning the function that
	// applies it; nothing is applied when it fails.
	load func(path string) (apply func(context.Context) error, err error)

	applied [sha256.Size]byte // the content last applied; zero: none yet
	refused [sha256.Size]byte // the content last refused, so it is logged and counted once
}

// configWatcher applies the watched files. poll is one round; run calls it
// every interval.
type configWatcher struct {
	files   []*watchedFile
	metrics *configMetrics
	logger  *slog.Logger
	mu      sync.Mutex // one poll at a time
}

// retryApply is how often an apply retries while the cluster has no leader.
const retryApply = 200 * time.Millisecond

// newConfigWatcher watches --policies and --rls-config (those that are set)
// and applies them to t.
func newConfigWatcher(f *serveFlags, t configTarget, m *configMetrics, logger *slog.Logger) *configWatcher {
	w := &configWatcher{metrics: m, logger: logger.With("component", "config")}
	prune := f.watch.prune
	if f.policies != "" {
		w.files = append(w.files, &watchedFile{flag: "--policies", source: sourcePolicies, path: f.policies,
			load: func(path string) (func(context.Context) error, error) {
				ps, err := api.LoadPolicies(path)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return applyPolicies(ctx, t, ps, prune) }, nil
			}})
	}
	if f.grpc.rlsConfig != "" {
		w.files = append(w.files, &watchedFile{flag: "--rls-config", source: sourceRLSConfig, path: f.grpc.rlsConfig,
			load: func(path string) (func(context.Context) error, error) {
				ds, err := rls.LoadPath(path)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return applyDomains(ctx, t, ds, prune) }, nil
			}})
	}
	for _, f := range w.files {
		m.init(f.source)
	}
	return w
}

// init makes a source's counters exist at 0, so an alert on their increase
// sees the first error.
func (m *configMetrics) init(source string) {
	m.errors.WithLabelValues(source)
	m.reloads.WithLabelValues(source)
}

// applyPolicies writes the policies that differ from this replica's copy
// and, with prune, deletes those not named.
func applyPolicies(ctx context.Context, t configTarget, ps []fsm.Policy, prune bool) error {
	if err := t.PutPolicies(ctx, ps, retryApply); err != nil {
		return err
	}
	if !prune {
		return nil
	}
	named := make(map[string]bool, len(ps))
	for _, p := range ps {
		named[p.Name] = true
	}
	for _, p := range t.ListPolicies() {
		if named[p.Name] {
			continue
		}
		if err := retryUnavailable(ctx, func() *service.Error { return t.DeletePolicy(ctx, p.Name) }); err != nil {
			return fmt.Errorf("prune policy %q: %w", p.Name, err)
		}
	}
	return nil
}

// applyDomains is applyPolicies for RLS domains.
func applyDomains(ctx context.Context, t configTarget, ds []*rls.Domain, prune bool) error {
	if err := t.LoadRLSDomains(ctx, ds); err != nil {
		return err
	}
	if !prune {
		return nil
	}
	named := make(map[string]bool, len(ds))
	for _, d := range ds {
		named[d.Name()] = true
	}
	stored, e := t.RLSDomains()
	if e != nil {
		return e
	}
	for _, d := range stored {
		if named[d.Name] {
			continue
		}
		if err := retryUnavailable(ctx, func() *service.Error { return t.DeleteRLSDomain(ctx, d.Name) }); err != nil {
			return fmt.Errorf("prune rls domain %q: %w", d.Name, err)
		}
	}
	return nil
}

// retryUnavailable runs a delete until it is done or refused: not_found
// counts as done (another node pruned it first), unavailable and
// outcome_unknown are retried (a delete is idempotent).
func retryUnavailable(ctx context.Context, del func() *service.Error) error {
	for {
		e := del()
		switch {
		case e == nil || e.Code == service.CodeNotFound:
			return nil
		case e.Code != service.CodeUnavailable && e.Code != service.CodeOutcomeUnknown:
			return e
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), e)
		case <-time.After(retryApply):
		}
	}
}

// poll reads every watched file and applies those whose content changed
// since they were last applied. A file that fails validation is logged with
// its flag and error and counted once per distinct content, and the running
// configuration is kept; so is a content the cluster refused. An apply that
// ends with ctx (shutdown) is tried again at the next poll. It returns the
// first refusal (for the start-up sync, where it is fatal).
func (w *configWatcher) poll(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first error
	for _, f := range w.files {
		if err := w.pollFile(ctx, f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (w *configWatcher) pollFile(ctx context.Context, f *watchedFile) error {
	before, err := contentHash(f.path)
	if err != nil {
		return w.refuse(f, hashOfError(err), err)
	}
	if before == f.applied || before == f.refused {
		return nil
	}
	apply, err := f.load(f.path)
	// The files changed while they were read (a ConfigMap swapped under
	// the load, say): what was validated, or refused, may be neither
	// version, so neither apply nor report it; the next poll reads the
	// settled content.
	if after, herr := contentHash(f.path); herr != nil || after != before {
		return nil
	}
	if err != nil {
		return w.refuse(f, before, err)
	}
	if err := apply(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return w.refuse(f, before, fmt.Errorf("apply: %w", err))
	}
	f.applied, f.refused = before, [sha256.Size]byte{}
	w.metrics.reloads.WithLabelValues(f.source).Inc()
	w.logger.Info("configuration applied", "flag", f.flag, "path", f.path)
	return nil
}

func (w *configWatcher) refuse(f *watchedFile, h [sha256.Size]byte, err error) error {
	err = fmt.Errorf("%s %s: %w", f.flag, f.path, err)
	if h == f.refused {
		return err
	}
	f.refused = h
	w.metrics.errors.WithLabelValues(f.source).Inc()
	w.logger.Error("configuration not applied: keeping the running one", "flag", f.flag, "path", f.path, "error", err)
	return err
}

// hashOfError stands for an unreadable input, so that the same read error
// is reported once, and a later readable content is a change.
func hashOfError(err error) [sha256.Size]byte {
	return sha256.Sum256([]byte("error\x00" + err.Error()))
}

// run applies the files once (the start-up sync: a refusal is returned, as
// a bad start-up config is fatal) and then, with a positive interval, polls
// until ctx ends.
func (w *configWatcher) run(ctx context.Context, interval time.Duration) error {
	if len(w.files) == 0 {
		return nil
	}
	if err := w.poll(ctx); err != nil {
		return err
	}
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.poll(ctx) // errors are logged and counted; the node keeps serving
		}
	}
}

// contentHash hashes a file's content, or, for a directory, the names and
// contents of its entries that are not dot-files (what rls.LoadPath reads,
// and then some: a change to a file it skips costs one idempotent reload).
// Paths are opened by name, so symlinks are followed: a ConfigMap's
// "..data" swap changes the content seen through every key's symlink, and
// "..data" itself and the timestamped directory are dot-files.
func contentHash(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	fi, err := os.Stat(path)
	if err != nil {
		return sum, err
	}
	h := sha256.New()
	if !fi.IsDir() {
		if err := hashFile(h, path); err != nil {
			return sum, err
		}
		copy(sum[:], h.Sum(nil))
		return sum, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return sum, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) > rls.MaxFiles {
		names = names[:rls.MaxFiles+1] // rls.LoadPath refuses the directory; enough to see a change
	}
	for _, name := range names {
		p := filepath.Join(path, name)
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // a dangling symlink, or removed since the listing
			}
			return sum, err
		}
		if fi.IsDir() {
			continue
		}
		fmt.Fprintf(h, "%d:%s", len(name), name)
		if err := hashFile(h, p); err != nil {
			return sum, err
		}
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// hashFile adds the SHA-256 of a file's content (fixed length, so the
// names and contents of a directory cannot run into each other).
func hashFile(h io.Writer, path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	fileSum := sha256.New()
	if _, err := io.Copy(fileSum, fh); err != nil {
		return err
	}
	h.Write(fileSum.Sum(nil))
	return nil
}

// startConfigSync applies --policies and --rls-config (or the domains of
// --rls-xds-server) through t in the background and, with
// --config-watch-interval, keeps them applied. A refusal of the start-up
// content goes to background (it stops the node, as a bad start-up input
// does); later ones are logged and counted.
func startConfigSync(ctx context.Context, f *serveFlags, t configTarget, m *configMetrics, logger *slog.Logger, background chan<- error) {
	startXDS(ctx, f, t, m, logger, background) // xds.go
	w := newConfigWatcher(f, t, m, logger)
	go func() {
		if err := w.run(ctx, f.watch.interval); err != nil && ctx.Err() == nil {
			background <- err
		}
	}()
}
