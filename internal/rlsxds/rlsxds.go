// Package rlsxds takes Envoy RLS domains from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: it subscribes
// over the aggregated discovery service (state of the world) to the type
// ratelimit.config.ratelimit.v3.RateLimitConfig, converts every resource of
// a response into an rls.Domain, and hands the whole set to Config.Apply.
//
// A response is one version of the configuration, taken or refused whole:
// every resource must convert and validate (as a file of --rls-config
// would), no two may name one domain, and Apply must succeed; then the
// version is ACKed. Otherwise it is NACKed with the reason in error_detail;
// a version that does not validate is not applied at all, so the last
// ACKed version stays in force (the xDS protocol's rule, which the
// management server sees in the NACK). One that Apply refuses part way may
// have changed what Apply wrote before the refusal.
package rlsxds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/limitd/limitd/rls"
)

// TypeURL is the xDS type of envoy ratelimit's configuration resource,
// taken from the generated message so it cannot drift from the proto.
var TypeURL = "type.googleapis.com/" + string((&rlsconf.RateLimitConfig{}).ProtoReflect().Descriptor().FullName())

// Config is a subscription.
type Config struct {
	// Server is the management server's host:port (any gRPC target).
	Server string
	// NodeID is the xDS node id this client presents; the server chooses
	// the snapshot by it.
	NodeID string
	// TLS, when set, secures the connection; nil: plain text.
	TLS *tls.Config
	// Apply takes a validated version: every domain the server serves, in
	// resource order. An error refuses the version (a NACK); Apply must
	// then have changed nothing, or only what a retry of it repeats.
	Apply func(ctx context.Context, domains []*rls.Domain) error
	// Refused is told of every NACKed version (for a metric); may be nil.
	Refused func(err error)
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait before reconnecting after a
	// stream ends (doubling from the first to the second); zero: 500ms, 30s.
	MinBackoff, MaxBackoff time.Duration
}

// Run subscribes until ctx ends, reconnecting with backoff whenever the
// stream or connection fails. It returns ctx's error, or an error for a
// Config it cannot use at all.
func Run(ctx context.Context, c Config) error {
	if c.Server == "" || c.Apply == nil {
		return errors.New("rlsxds: Server and Apply are required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(30*time.Second, c.MinBackoff)
	}
	creds := insecure.NewCredentials()
	if c.TLS != nil {
		creds = credentials.NewTLS(c.TLS)
	}
	conn, err := grpc.NewClient(c.Server, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("rlsxds: %s: %w", c.Server, err)
	}
	defer conn.Close()
	node := &core.Node{Id: c.NodeID, UserAgentName: "limitd"}
	backoff := c.MinBackoff
	for {
		start := time.Now()
		// A new ADS client for each stream, so its first request names no
		// version and the server sends its current one, to be validated
		// again: the library's client, reused, would open the new stream
		// by ACKing whatever it last received, a NACKed version included.
		// The resend costs nothing when it is the running version: only
		// changed domains are written.
		ads := sotw.NewADSClient(ctx, node, TypeURL)
		err := c.stream(ctx, conn, ads)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > c.MaxBackoff {
			backoff = c.MinBackoff // it ran a while: a new failure, not the same one
		}
		c.Logger.Warn("xDS stream ended: reconnecting; the running RLS configuration is kept", "server", c.Server, "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.MaxBackoff)
	}
}

// stream runs one ADS stream: each response is validated, applied and
// ACKed, or NACKed; it returns when the stream fails.
func (c *Config) stream(ctx context.Context, conn *grpc.ClientConn, ads sotw.ADSClient) error {
	// The stream is the ADS client's, on ctx; a Fetch error means it
	// ended, so nothing is left open when this returns.
	if err := ads.InitConnect(conn); err != nil {
		return err
	}
	var refused [sha256.Size]byte // the response last NACKed
	var refusedWhy string
	var nackDelay time.Duration
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return err
		}
		// A server may resend a version it was told is bad at once (a
		// go-control-plane snapshot cache answers every request whose
		// version differs from its snapshot's, a NACK included): the same
		// content is NACKed again without being logged or counted again,
		// and after a growing pause, so the two do not spin.
		h := resourcesHash(resp.Resources)
		if h == refused {
			nackDelay = min(max(2*nackDelay, c.MinBackoff), c.MaxBackoff)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(nackDelay):
			}
			if err := ads.Nack(refusedWhy); err != nil {
				return err
			}
			continue
		}
		domains, err := Convert(resp.Resources)
		if err == nil {
			if err = c.Apply(ctx, domains); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				err = fmt.Errorf("apply: %w", err)
			}
		}
		if err != nil {
			c.Logger.Error("xDS RLS configuration refused (NACK): keeping the running one", "server", c.Server, "error", err)
			if c.Refused != nil {
				c.Refused(err)
			}
			refused, refusedWhy, nackDelay = h, err.Error(), 0
			if err := ads.Nack(err.Error()); err != nil {
				return err
			}
			continue
		}
		refused = [sha256.Size]byte{}
		c.Logger.Info("xDS RLS configuration applied (ACK)", "server", c.Server, "domains", len(domains))
		if err := ads.Ack(); err != nil {
			return err
		}
	}
}

// Convert turns a response's resources into domains, validated as
// rls.Parse validates a file: each RateLimitConfig becomes the
// configuration envoy ratelimit's YAML would state, and is parsed from
// that, so a domain from xDS meets exactly the rules and bounds of one
// from a file or the API. Errors name the resource and the field
// (descriptors[0].rate_limit.unit).
func Convert(resources []*anypb.Any) ([]*rls.Domain, error) {
	out := make([]*rls.Domain, 0, len(resources))
	from := map[string]string{}
	for i, res := range resources {
		var pb rlsconf.RateLimitConfig
		if err := anypb.UnmarshalTo(res, &pb, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		where := fmt.Sprintf("resource %q", pb.GetName())
		if pb.GetName() == "" {
			where = fmt.Sprintf("resources[%d]", i)
		}
		d, err := ToDomain(where, &pb)
		if err != nil {
			return nil, err
		}
		if prev, dup := from[d.Name()]; dup {
			return nil, &rls.Error{File: where, Field: "domain", Message: fmt.Sprintf("domain %q is also configured in %s", d.Name(), prev)}
		}
		from[d.Name()] = where
		out = append(out, d)
	}
	return out, nil
}

// ToDomain converts and validates one RateLimitConfig; where names it in
// errors.
func ToDomain(where string, pb *rlsconf.RateLimitConfig) (*rls.Domain, error) {
	c := &rls.Config{Domain: pb.GetDomain(), Descriptors: descriptors(pb.GetDescriptors())}
	d, err := rls.Parse(where, c.Canonical())
	var re *rls.Error
	if errors.As(err, &re) {
		re.Line = 0 // a line of the JSON form, not of anything the server sent
	}
	return d, err
}

func descriptors(pbs []*rlsconf.RateLimitDescriptor) []rls.Descriptor {
	if len(pbs) == 0 {
		return nil
	}
	out := make([]rls.Descriptor, len(pbs))
	for i, pb := range pbs {
		out[i] = rls.Descriptor{
			Key: pb.GetKey(), Value: pb.GetValue(),
			RateLimit:      rateLimit(pb.GetRateLimit()),
			ShadowMode:     pb.GetShadowMode(),
			DetailedMetric: pb.GetDetailedMetric(),
			Descriptors:    descriptors(pb.GetDescriptors()),
		}
	}
	return out
}

func rateLimit(pb *rlsconf.RateLimitPolicy) *rls.RateLimit {
	if pb == nil {
		return nil
	}
	rl := &rls.RateLimit{
		Name:            pb.GetName(),
		RequestsPerUnit: pb.GetRequestsPerUnit(),
		Unlimited:       pb.GetUnlimited(),
	}
	// UNKNOWN (0, the proto's unset value) is no unit: rls then requires
	// one unless unlimited, as envoy ratelimit does.
	if u := pb.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		rl.Unit = strings.ToLower(u.String())
	}
	for _, r := range pb.GetReplaces() {
		rl.Replaces = append(rl.Replaces, rls.Replace{Name: r.GetName()})
	}
	return rl
}

// resourcesHash identifies a response's content: its resources' types and
// bytes as received.
func resourcesHash(rs []*anypb.Any) [sha256.Size]byte {
	h := sha256.New()
	for _, r := range rs {
		fmt.Fprintf(h, "%d:%s%d:", len(r.GetTypeUrl()), r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
