package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/limitd/limitd/buildinfo"
	"github.com/limitd/limitd/internal/tracing/setup"
)

// checkTracing refuses, before anything is written, an OTEL_* setting
// startTracing could not honour (setup.Validate).
func checkTracing() error { return setup.Validate(os.Getenv) }

// startTracing turns on OpenTelemetry tracing when the OTEL_* environment
// asks for it (setup.Wanted; docs/OPERATIONS.md, Tracing). There is no
// serve flag: the standard variables are how every OTel SDK is configured,
// and a collector's operators already set them. It returns the stop that
// flushes the spans still buffered, bounded by timeout.
func startTracing(nodeID string, logger *slog.Logger) (stop func(), err error) {
	stopTP, on, reason, err := setup.Start(context.Background(), setup.Options{NodeID: nodeID, Version: buildinfo.Current().Version})
	if err != nil {
		return func() {}, err
	}
	if !on {
		logger.Debug("tracing off", "reason", reason)
		return func() {}, nil
	}
	logger.Info("tracing on: exporting spans over OTLP/HTTP", "reason", reason)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTP(ctx); err != nil {
			logger.Warn("tracing: flushing spans at stop", "err", err)
		}
	}, nil
}
