package grpcapi

import (
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// The degraded option and mark on the wire (service/degraded.go decides).

// degradedProto is a policy's degraded option (nil: none).
func degradedProto(p *limitdv1.Policy, c *service.DegradedConfig) {
	if c != nil {
		p.Degraded = &limitdv1.DegradedOption{Mode: c.Mode}
	}
}

// degradedConfig reads a PutPolicy request's degraded option (nil: none).
func degradedConfig(p *limitdv1.Policy) *service.DegradedConfig {
	if d := p.GetDegraded(); d != nil {
		return &service.DegradedConfig{Mode: d.GetMode()}
	}
	return nil
}
