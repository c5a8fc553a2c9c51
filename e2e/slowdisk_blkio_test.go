package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The slow-disk hand-over on a real throttled block device: three limitd
// processes, the leader's data directory on an ext4 file system on a loop
// device, and, 3 s into a steady load, the leader's writes to that device
// throttled to 3 per second (cgroup v1 blkio.throttle.write_iops_device)
// for 15 s. The leader's Raft log writes stall past --disk-stall-transfer,
// it hands leadership away (cluster/diskwatch.go), and the cluster goes on
// at the fast nodes' pace. The proof: from 3 s after the slowdown to its
// end the cluster answers at least half the rate it answered before it,
// and the checks sent after the hand-over have a median latency under 1 s.
//
// It needs root, loop devices, mkfs.ext4 and cgroup v1's blkio controller,
// which CI containers may lack: it runs only with LIMITD_BLKIO=1
// (scripts/chaos.sh SUITES=slowdisk), and then fails, not skips, when one
// is missing. The loop device, the mount and the cgroup are removed at the
// end whatever happens (t.Cleanup; chaos.sh's trap removes what a killed
// run left).

const (
	blkioRoot     = "/sys/fs/cgroup/blkio"
	blkioIOPS     = 3
	blkioSlowFor  = 15 * time.Second
	blkioBaseline = 3 * time.Second
	blkioImage    = "limitd-blkio.img" // chaos.sh's trap finds leftovers by this name
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// blkioDisk makes an ext4 file system on a loop device, mounted at a new
// directory, and a blkio cgroup; throttle limits the writes of the
// processes put in it (add) to the device.
type blkioDisk struct {
	t      *testing.T
	dev    string // /dev/loopN
	majMin string // "7:N"
	mnt    string
	cgroup string
}

func newBlkioDisk(t *testing.T) *blkioDisk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("LIMITD_BLKIO=1: needs root (loop devices, mount, cgroups)")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount", "lsblk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("LIMITD_BLKIO=1: %s not found: %v", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(blkioRoot, "blkio.throttle.write_iops_device")); err != nil {
		t.Fatalf("LIMITD_BLKIO=1: cgroup v1 blkio throttling not available: %v", err)
	}
	d := &blkioDisk{t: t}
	img := filepath.Join(t.TempDir(), blkioImage)
	f, err := os.Create(img)
	must(t, err)
	must(t, f.Truncate(512<<20))
	must(t, f.Close())
	d.dev = run(t, "losetup", "-f", "--show", img)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", d.dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", d.dev, err, out)
		}
	})
	d.majMin = strings.ReplaceAll(run(t, "lsblk", "-dno", "MAJ:MIN", d.dev), " ", "")
	run(t, "mkfs.ext4", "-q", d.dev)
	d.mnt = t.TempDir()
	run(t, "mount", d.dev, d.mnt)
	t.Cleanup(func() {
		// The process using it is killed first (cleanups run last in, first out).
		var err error
		var out []byte
		for i := 0; i < 50; i++ {
			if out, err = exec.Command("umount", d.mnt).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("umount %s: %v: %s", d.mnt, err, out)
	})
	d.cgroup = filepath.Join(blkioRoot, fmt.Sprintf("limitd-blkio-%d", os.Getpid()))
	must(t, os.Mkdir(d.cgroup, 0o755))
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(d.cgroup, "blkio.throttle.write_iops_device"), []byte(d.majMin+" 0"), 0o644)
		var err error
		for i := 0; i < 50; i++ { // empty once its process is reaped
			if err = os.Remove(d.cgroup); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s: %v", d.cgroup, err)
	})
	return d
}

func (d *blkioDisk) add(pid int) {
	d.t.Helper()
	must(d.t, os.WriteFile(filepath.Join(d.cgroup, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644))
}

func (d *blkioDisk) throttle(iops int) {
	d.t.Helper()
	must(d.t, os.WriteFile(filepath.Join(d.cgroup, "blkio.throttle.write_iops_device"), []byte(fmt.Sprintf("%s %d", d.majMin, iops)), 0o644))
}

// slowLoad is a closed loop of checks through every node: completions and
// latencies by the time they were sent.
type slowLoad struct {
	client *http.Client
	mu     sync.Mutex
	done   []slowSample
}

type slowSample struct {
	sent time.Time
	took time.Duration
	ok   bool
}

func (l *slowLoad) worker(procs []*proc, first int, stop <-chan struct{}) {
	for i := first; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		p := procs[i%len(procs)]
		sent := time.Now()
		body := fmt.Sprintf(`{"key":"slow/%d","limit":{"algorithm":"fixed_window","limit":1000000000,"window":"1h"},"cost":1}`, i%64)
		resp, err := l.client.Post(p.URL("/v1/check"), "application/json", strings.NewReader(body))
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			resp.Body.Close()
		}
		l.mu.Lock()
		l.done = append(l.done, slowSample{sent: sent, took: time.Since(sent), ok: ok})
		l.mu.Unlock()
	}
}

// rate is the answered checks per second among those answered in [from, to).
func (l *slowLoad) rate(from, to time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.done {
		if at := s.sent.Add(s.took); s.ok && !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// latencies are those of the checks sent in [from, to), failures included
// (as the time they took).
func (l *slowLoad) latencies(from, to time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, s := range l.done {
		if !s.sent.Before(from) && s.sent.Before(to) {
			out = append(out, s.took)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func TestSlowDiskBlkioHandover(t *testing.T) {
	if os.Getenv("LIMITD_BLKIO") != "1" {
		t.Skip("needs root, loop devices and cgroup v1 blkio: set LIMITD_BLKIO=1 (scripts/chaos.sh SUITES=slowdisk)")
	}
	disk := newBlkioDisk(t)
	flags := []string{"--disk-stall-transfer", "500ms", "--disk-stall-window", "1s", "--disk-stall-fail", "60s"}

	n1 := newProc(t, "n1", "")
	n1.Node.DataDir = filepath.Join(disk.mnt, "n1")
	n1.start(flags...)
	disk.add(n1.PID())
	n1.waitReady()
	n2 := newProc(t, "n2", n1.URL(""))
	n2.start(flags...)
	n3 := newProc(t, "n3", n1.URL(""))
	n3.start(flags...)
	n2.waitReady()
	n3.waitReady()
	procs := []*proc{n1, n2, n3}
	load := &slowLoad{client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	t.Cleanup(load.client.CloseIdleConnections)
	crash := newCrashLoad(t, procs)
	if l := crash.leader(nil, 10*time.Second); l != n1 {
		t.Fatalf("leader is %s, not n1 (whose data is on %s)", l.ID, disk.dev)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); load.worker(procs, w, stop) }()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	time.Sleep(time.Second) // connections up
	began := time.Now()
	time.Sleep(blkioBaseline)
	slowAt := time.Now()
	disk.throttle(blkioIOPS)
	var handedAt atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), blkioSlowFor)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			for _, p := range []*proc{n2, n3} {
				if v, err := crash.view(p); err == nil && v.LeaderID != "" && v.LeaderID != n1.ID {
					handedAt.Store(time.Now().UnixNano())
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	<-ctx.Done()
	end := time.Now()
	disk.throttle(0)
	time.Sleep(time.Second)
	stopLoad()

	baseline := load.rate(began, slowAt)
	after := load.rate(slowAt.Add(3*time.Second), end)
	minRate := after
	for at := slowAt.Add(3 * time.Second); at.Add(time.Second).Before(end); at = at.Add(time.Second) {
		minRate = min(minRate, load.rate(at, at.Add(time.Second)))
	}
	if handedAt.Load() == 0 {
		t.Fatalf("n1 kept the leadership through %s at %d write IOPS (rate before %.0f/s, during %.0f/s); n1's log:\n%s", blkioSlowFor, blkioIOPS, baseline, after, n1.Logs())
	}
	handed := time.Unix(0, handedAt.Load())
	lat := load.latencies(handed, end)
	p50, p99 := quantile(lat, 0.5), quantile(lat, 0.99)
	t.Logf("BLKIO-SUMMARY {\"iops\":%d,\"slow_s\":%.0f,\"baseline_per_s\":%.0f,\"after_3s_per_s\":%.0f,\"min_1s_per_s\":%.0f,\"handover_s\":%.2f,\"p50_after_ms\":%.1f,\"p99_after_ms\":%.1f,\"checks_after\":%d}",
		blkioIOPS, blkioSlowFor.Seconds(), baseline, after, minRate, handed.Sub(slowAt).Seconds(),
		float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, len(lat))
	load.mu.Lock()
	ops, answered := len(load.done), 0
	for _, s := range load.done {
		if s.ok {
			answered++
		}
	}
	load.mu.Unlock()
	crashSummary(t, map[string]any{
		"nodes": 3, "rounds": 1, "leader_changes": 1, "ops": ops, "allowed": answered, "unknown": ops - answered,
		"over_admissions": 0, "lost_acknowledged": 0, "linearizable": "n/a", "seconds": time.Since(began).Seconds(),
	})
	if baseline == 0 {
		t.Fatal("no checks answered before the slowdown")
	}
	if after < baseline/2 {
		t.Errorf("from 3 s after the slowdown the cluster answered %.0f/s, under half its rate before (%.0f/s)", after, baseline)
	}
	if p50 >= time.Second {
		t.Errorf("median latency after the hand-over %v (p99 %v): not under 1 s", p50, p99)
	}
	for _, p := range procs {
		if !p.Running() {
			t.Errorf("%s stopped: %s", p.ID, lastLine(p.Logs()))
		}
	}
}
