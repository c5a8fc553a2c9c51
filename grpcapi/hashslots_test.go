package grpcapi

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// slotsSource is a node's slot map with data groups, as groups.Host gives it.
type slotsSource struct {
	v   service.Slots
	err error
}

func (s slotsSource) Slots(context.Context) (service.Slots, error) { return s.v, s.err }

// GetClusterSlots is GET /v1/cluster/slots over gRPC: a one-group node is
// group 0 owning every slot, epoch 0, with its node's HTTP address; with
// data groups every group, its leader, replicas and runs, and the nodes,
// field by field; a map the node cannot give is Unavailable. Public.
func TestGetClusterSlots(t *testing.T) {
	// Public: a node with an admin token answers without it.
	c := newTestCluster(t, 1, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	c.leader()
	got, err := c.limitd(0).GetClusterSlots(ctx, &limitdv1.GetClusterSlotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := c.nodes[0].ID()
	want := &limitdv1.ClusterSlots{Epoch: 0,
		Groups: []*limitdv1.ClusterSlotGroup{{Id: 0, Leader: id, Replicas: []string{id}, Slots: []*limitdv1.SlotRange{{First: 0, Last: 4095}}}},
		Nodes:  []*limitdv1.ClusterSlotNode{{Id: id, Http: c.HTTPAddr(0)}}}
	if !proto.Equal(got, want) {
		t.Fatalf("one group: %v, want %v", got, want)
	}

	multi := service.Slots{Epoch: 7, Groups: []service.SlotGroup{
		{ID: 0, Leader: "n1", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{}},
		{ID: 1, Leader: "n2", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{0, 99}, {200, 4095}}},
		{ID: 2, Leader: "", Replicas: []string{"n1", "n2"}, Slots: [][2]uint16{{100, 199}}}},
		Nodes: []service.SlotNode{{ID: "n1", HTTP: "127.0.0.1:1"}, {ID: "n2", HTTP: "127.0.0.1:2"}}}
	g := serveSlots(t, c, slotsSource{v: multi})
	got, err = g.GetClusterSlots(ctx, &limitdv1.GetClusterSlotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want = &limitdv1.ClusterSlots{Epoch: 7, Groups: []*limitdv1.ClusterSlotGroup{
		{Id: 0, Leader: "n1", Replicas: []string{"n1", "n2"}},
		{Id: 1, Leader: "n2", Replicas: []string{"n1", "n2"}, Slots: []*limitdv1.SlotRange{{First: 0, Last: 99}, {First: 200, Last: 4095}}},
		{Id: 2, Replicas: []string{"n1", "n2"}, Slots: []*limitdv1.SlotRange{{First: 100, Last: 199}}}},
		Nodes: []*limitdv1.ClusterSlotNode{{Id: "n1", Http: "127.0.0.1:1"}, {Id: "n2", Http: "127.0.0.1:2"}}}
	if !proto.Equal(got, want) {
		t.Fatalf("data groups: %v, want %v", got, want)
	}

	g = serveSlots(t, c, slotsSource{err: fmt.Errorf("%w: not open yet", nodeapi.ErrUnavailable)})
	_, err = g.GetClusterSlots(ctx, &limitdv1.GetClusterSlotsRequest{})
	wantError(t, err, codes.Unavailable, "unavailable", "")
}

// serveSlots is a gRPC server over node 0's capabilities whose service
// takes its slot map from src.
func serveSlots(t *testing.T, c *testCluster, src service.SlotsSource) limitdv1.LimitdClient {
	t.Helper()
	s, err := New(service.New(clustertest.ServiceDeps(c.nodes[0]), service.Config{RequestTimeout: 3 * time.Second, Slots: src}),
		Config{Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.Stop(ctx)
		cancel()
	})
	return limitdv1.NewLimitdClient(conn)
}
