package proccluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A CPU budget per process: each node (and, if the driver wants, the load
// generator) in a cgroup v1 cpu controller group of its own whose CFS quota
// is its share of a CPU, so processes sharing one box stand in for machines
// of a fixed size. A group caps; it does not reserve: a busy box can still
// give a group less than its quota, which is why drivers report the box's
// load beside each row.

// CgroupCPURoot is where the cgroup v1 cpu controller is mounted. Only v1 is
// supported: its cpu.cfs_quota_us and cpu.stat are what this box has (v2's
// cpu.max has the same meaning, and would go here if a box had only v2).
var CgroupCPURoot = "/sys/fs/cgroup/cpu"

// DefaultCPUPeriod is the CFS period of a group: 10 ms keeps a throttled
// process's stall under one period (at 0.25 CPU, 7.5 ms), where the
// kernel's default of 100 ms stalls it for 75 ms and measures the stalls.
const DefaultCPUPeriod = 10 * time.Millisecond

// CPUGroup is one cpu controller group with a quota.
type CPUGroup struct {
	Path   string        // the group's directory
	CPU    float64       // the budget, in CPUs (quota ÷ period)
	Period time.Duration // the CFS period
}

// CPUStat is a group's cpu.stat: the CFS periods in which its processes
// ran, those in which they hit the quota and were stopped, and the time
// they spent stopped. Over a run, Throttled ÷ Periods near 1 means the
// process wanted more CPU than its budget the whole time.
type CPUStat struct {
	Periods, Throttled int64
	ThrottledTime      time.Duration
}

// Sub is s − o: the counts over an interval.
func (s CPUStat) Sub(o CPUStat) CPUStat {
	return CPUStat{Periods: s.Periods - o.Periods, Throttled: s.Throttled - o.Throttled, ThrottledTime: s.ThrottledTime - o.ThrottledTime}
}

// CPUGroupsSupported says why CPU groups cannot be made here (nil if they
// can): the cpu controller must be mounted as cgroup v1 and writable (root).
func CPUGroupsSupported() error {
	quota := filepath.Join(CgroupCPURoot, "cpu.cfs_quota_us")
	if _, err := os.Stat(quota); err != nil {
		return fmt.Errorf("no cgroup v1 cpu controller at %s (cgroup v2's cpu.max is not supported): %w", CgroupCPURoot, err)
	}
	if err := syscall.Access(CgroupCPURoot, 2 /* W_OK */); err != nil {
		return fmt.Errorf("cannot create cgroups under %s (run as root): %w", CgroupCPURoot, err)
	}
	return nil
}

// groupSeq makes group names unique within this process.
var groupSeq atomic.Int64

// GroupRunName is a name for one run's groups, unique on the box while
// this process lives: limitd-<pid>-<seq>.
func GroupRunName() string {
	return fmt.Sprintf("limitd-%d-%d", os.Getpid(), groupSeq.Add(1))
}

// NewCPUGroup creates the group name under CgroupCPURoot with a quota of
// cpu CPUs per period (DefaultCPUPeriod when 0). A group of that name left
// by an earlier run is reused if it is empty.
func NewCPUGroup(name string, cpu float64, period time.Duration) (*CPUGroup, error) {
	if period <= 0 {
		period = DefaultCPUPeriod
	}
	periodUS := period.Microseconds()
	quotaUS := int64(cpu * float64(periodUS))
	// The kernel refuses quotas and periods under 1 ms.
	if periodUS < 1000 || periodUS > 1000000 {
		return nil, fmt.Errorf("CPU period %s: must be 1ms to 1s", period)
	}
	if quotaUS < 1000 {
		return nil, fmt.Errorf("CPU budget %g of a %s period is %dµs: the kernel's least quota is 1ms (lengthen the period)", cpu, period, quotaUS)
	}
	if err := CPUGroupsSupported(); err != nil {
		return nil, err
	}
	g := &CPUGroup{Path: filepath.Join(CgroupCPURoot, name), CPU: cpu, Period: period}
	if err := os.Mkdir(g.Path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", g.Path, err)
	}
	// The period first: a quota above the old period's share is allowed
	// either way, but a parent's limits are checked against the pair.
	if err := g.write("cpu.cfs_period_us", strconv.FormatInt(periodUS, 10)); err != nil {
		g.Remove()
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", strconv.FormatInt(quotaUS, 10)); err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

func (g *CPUGroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(g.Path, file), []byte(v), 0); err != nil {
		return fmt.Errorf("cgroup %s: write %s: %w", g.Path, file, err)
	}
	return nil
}

// SetShares sets the group's cpu.shares: its weight against its siblings
// (every process of the root group weighs 1024, as does a group by
// default) when the box has fewer idle CPUs than the budgets ask. A quota
// only caps; a high weight makes the budget a reservation on a box others
// load, at their expense for the run's length.
func (g *CPUGroup) SetShares(n int) error {
	if n < 2 || n > 262144 {
		return fmt.Errorf("cpu.shares %d: must be 2 to 262144", n)
	}
	return g.write("cpu.shares", strconv.Itoa(n))
}

// Add moves process pid (every thread of it) into the group. A process's
// children started afterwards are born in it.
func (g *CPUGroup) Add(pid int) error {
	return g.write("cgroup.procs", strconv.Itoa(pid))
}

// Release moves pid back to the cpu group it came from (from) — for a
// driver that put itself in a group and must leave it before Remove.
func (g *CPUGroup) Release(pid int, from string) error {
	dir := filepath.Join(CgroupCPURoot, from)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move %d back to cgroup %s: %w", pid, dir, err)
	}
	return nil
}

// Stat reads the group's cpu.stat.
func (g *CPUGroup) Stat() (CPUStat, error) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cpu.stat"))
	if err != nil {
		return CPUStat{}, err
	}
	return parseCPUStat(string(b))
}

// parseCPUStat reads nr_periods, nr_throttled and throttled_time (ns).
func parseCPUStat(s string) (CPUStat, error) {
	var st CPUStat
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return CPUStat{}, fmt.Errorf("cpu.stat %s: %w", k, err)
		}
		switch k {
		case "nr_periods":
			st.Periods, seen = n, seen+1
		case "nr_throttled":
			st.Throttled, seen = n, seen+1
		case "throttled_time":
			st.ThrottledTime, seen = time.Duration(n), seen+1
		}
	}
	if seen != 3 {
		return CPUStat{}, fmt.Errorf("cpu.stat lacks nr_periods, nr_throttled or throttled_time: %q", s)
	}
	return st, nil
}

// Remove deletes the group. The kernel refuses while a process is in it,
// and a process just reaped can take a moment to leave: Remove retries for
// up to a second.
func (g *CPUGroup) Remove() error {
	var err error
	for try := 0; try < 50; try++ {
		if err = syscall.Rmdir(g.Path); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", g.Path, err)
}

// CPUGroupOf is the path, relative to the cpu controller's root, of the
// group pid is in ("/" for the root), from /proc/PID/cgroup.
func CPUGroupOf(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-id:controllers:path; the cpu controller may share a
		// hierarchy ("cpu,cpuacct").
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("/proc/%d/cgroup names no cpu controller", pid)
}
