package bench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// CPU per check: the CPU time (user + system, all threads) a process spent
// during the measured interval, divided by the checks answered in it
// (allowed + refused). Unlike checks/s it barely moves between runs on a
// shared machine, so it is the measure to compare.

// ProcessCPU is one process's CPU time over the measured interval.
type ProcessCPU struct {
	Role string        // "leader", "follower", "node" (role unknown), "redis", "load generator"
	Name string        // node id or program name
	PID  int           //
	CPU  time.Duration // utime + stime during the measured interval
	// Budget is the process's CPU budget in CPUs (a cgroup's quota ÷
	// period), 0 for none. ReadThrottle, set with it, reads the group's
	// cumulative CFS counters; the meter fills Throttle with their change
	// over the measured interval.
	Budget       float64
	ReadThrottle func() (Throttle, error)
	Throttle     Throttle
}

// Throttle is a CPU group's CFS counters over an interval: the periods in
// which the process ran, and those in which it used its whole quota and
// was stopped until the next.
type Throttle struct {
	Periods, Throttled int64
}

// ThrottledFraction is Throttled ÷ Periods (0 without periods).
func (t Throttle) ThrottledFraction() float64 {
	if t.Periods <= 0 {
		return 0
	}
	return float64(t.Throttled) / float64(t.Periods)
}

// BudgetUsed is the share of its budget the process used over interval:
// its CPU time ÷ (Budget × interval); 0 without a budget.
func (p ProcessCPU) BudgetUsed(interval time.Duration) float64 {
	if p.Budget <= 0 || interval <= 0 {
		return 0
	}
	return p.CPU.Seconds() / (p.Budget * interval.Seconds())
}

func (p ProcessCPU) label() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Role
}

// PerCheck is the process's CPU time per answered check (0 when none).
func (p ProcessCPU) PerCheck(answered int64) time.Duration {
	if answered <= 0 {
		return 0
	}
	return p.CPU / time.Duration(answered)
}

// parseStatCPU returns utime + stime, in clock ticks, from the contents of
// /proc/PID/stat. The command name (field 2) is in parentheses and may hold
// spaces and parentheses itself, so fields are counted after the last ')':
// state is field 3, utime field 14 and stime field 15.
func parseStatCPU(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no ')' after the command name")
	}
	f := bytes.Fields(stat[i+1:])
	const utime = 14 - 3 // index in f: f[0] is field 3
	if len(f) <= utime+1 {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(f), utime+2)
	}
	u, err := strconv.ParseUint(string(f[utime]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseUint(string(f[utime+1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return u + s, nil
}

// clockTicks is the kernel's USER_HZ (the unit of /proc/PID/stat times), from
// AT_CLKTCK in this process's auxiliary vector; 100 (Linux's value on every
// common architecture) if it cannot be read.
var clockTicks = sync.OnceValue(func() uint64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	return auxvClockTicks(b)
})

// auxvClockTicks finds AT_CLKTCK (17) in a 64-bit auxiliary vector.
func auxvClockTicks(auxv []byte) uint64 {
	const atClkTck = 17
	for ; len(auxv) >= 16; auxv = auxv[16:] {
		k, v := binary.NativeEndian.Uint64(auxv), binary.NativeEndian.Uint64(auxv[8:])
		if k == 0 {
			break
		}
		if k == atClkTck && v > 0 {
			return v
		}
	}
	return 100
}

func ticksToDuration(ticks, hz uint64) time.Duration {
	return time.Duration(ticks) * time.Second / time.Duration(hz)
}

// ReadCPU returns the CPU time pid has used so far (Linux /proc).
func ReadCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	t, err := parseStatCPU(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ticksToDuration(t, clockTicks()), nil
}

// CPUMeter measures processes over Run's measured interval: Run calls Begin
// when the warm-up ends and End when the last request is answered.
type CPUMeter struct {
	mu      sync.Mutex
	procs   []ProcessCPU
	start   []time.Duration
	thr     []Throttle // ReadThrottle at Begin
	begun   bool
	readCPU func(pid int) (time.Duration, error)
	now     func() time.Time
	began   time.Time
	wall    time.Duration // Begin to End
	errs    []error
}

// NewCPUMeter measures procs (Role, Name and PID set; CPU is filled in).
func NewCPUMeter(procs ...ProcessCPU) *CPUMeter {
	return &CPUMeter{procs: append([]ProcessCPU(nil), procs...), readCPU: ReadCPU, now: time.Now}
}

// Begin records every process's CPU time so far.
func (m *CPUMeter) Begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.start = make([]time.Duration, len(m.procs))
	m.thr = make([]Throttle, len(m.procs))
	m.began = m.now()
	for i, p := range m.procs {
		if p.ReadThrottle != nil {
			th, err := p.ReadThrottle()
			if err != nil {
				m.errs = append(m.errs, fmt.Errorf("%s (pid %d) CPU group: %w", p.label(), p.PID, err))
				m.start[i] = -1
				continue
			}
			m.thr[i] = th
		}
		t, err := m.readCPU(p.PID)
		if err != nil {
			m.errs = append(m.errs, fmt.Errorf("%s (pid %d): %w", p.label(), p.PID, err))
			t = -1 // left out at End
		}
		m.start[i] = t
	}
	m.begun = true
}

// Interval is the wall time from Begin to End (0 before End): what the
// processes' CPU times were measured over.
func (m *CPUMeter) Interval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wall
}

// End returns each process's CPU time since Begin. A process that could not
// be read at both ends is left out and named in the error.
func (m *CPUMeter) End() ([]ProcessCPU, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.begun {
		return nil, errors.New("CPU not measured: the run ended before its warm-up did")
	}
	m.wall = m.now().Sub(m.began)
	out := make([]ProcessCPU, 0, len(m.procs))
	errs := m.errs
	for i, p := range m.procs {
		if m.start[i] < 0 {
			continue
		}
		t, err := m.readCPU(p.PID)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d): %w", p.label(), p.PID, err))
			continue
		}
		if t < m.start[i] {
			errs = append(errs, fmt.Errorf("%s (pid %d): CPU time went backwards (another process with that pid?)", p.label(), p.PID))
			continue
		}
		p.CPU = t - m.start[i]
		if p.ReadThrottle != nil {
			th, err := p.ReadThrottle()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (pid %d) CPU group: %w", p.label(), p.PID, err))
				continue
			}
			p.Throttle = Throttle{Periods: th.Periods - m.thr[i].Periods, Throttled: th.Throttled - m.thr[i].Throttled}
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}
