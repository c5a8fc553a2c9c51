package service_test

import (
	"strings"
	"testing"
)

// The packages with tracing hook sites build the OpenTelemetry API alone
// (internal/tracing): the SDK and the OTLP exporter (internal/tracing/setup)
// are serve's, so a front end or the cluster does not carry them, and the
// hooks cannot reach past the API's Enabled-guarded calls.
func TestHookSitesImportOnlyTheTracingAPI(t *testing.T) {
	roots := []string{"service", "api", "grpcapi", "cluster", "cluster/forward", "internal/tracing"}
	pkgs := make([]string, len(roots))
	for i, r := range roots {
		pkgs[i] = module + r
	}
	imports := goListDeps(t, pkgs...)
	for _, root := range roots {
		for pkg, path := range reachable(imports, module+root) {
			if pkg == module+"internal/tracing/setup" || strings.HasPrefix(pkg, "go.opentelemetry.io/otel/sdk") ||
				strings.HasPrefix(pkg, "go.opentelemetry.io/otel/exporters") {
				t.Errorf("%s imports %s (via %s): hook sites use internal/tracing, the API only", root, pkg, path)
			}
		}
	}
}
