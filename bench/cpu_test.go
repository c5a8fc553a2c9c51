package bench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// A /proc/PID/stat line from Linux 6.x (fields 14 and 15, utime and stime,
// are 1234 and 567), with command names that hold spaces and parentheses.
const statLine = "4242 (%s) S 1 4242 4242 0 -1 4194560 19470 0 0 0 1234 567 0 0 20 0 9 0 1133 1463967744 7361 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

func TestParseStatCPU(t *testing.T) {
	for _, comm := range []string{"limitd", "redis-server *:6379", "a) b (c", ")"} {
		got, err := parseStatCPU([]byte(strings.Replace(statLine, "%s", comm, 1)))
		if err != nil || got != 1234+567 {
			t.Errorf("comm %q: %d, %v; want 1801 ticks", comm, got, err)
		}
	}
	for _, bad := range []string{"", "4242 limitd S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 19470 0 0 0 12x4 567 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// The real thing: this process has used some CPU, and it only grows.
	a, err := ReadCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2e7; i++ { // burn some CPU
		_ = i * i
	}
	b, err := ReadCPU(os.Getpid())
	if err != nil || b < a {
		t.Fatalf("CPU %v then %v (%v)", a, b, err)
	}
}

func TestAuxvClockTicks(t *testing.T) {
	aux := func(pairs ...uint64) []byte {
		var b []byte
		for _, v := range pairs {
			b = binary.NativeEndian.AppendUint64(b, v)
		}
		return b
	}
	if got := auxvClockTicks(aux(6, 4096, 17, 250, 0, 0)); got != 250 {
		t.Errorf("AT_CLKTCK 250: got %d", got)
	}
	if got := auxvClockTicks(aux(6, 4096, 0, 0, 17, 250)); got != 100 {
		t.Errorf("entry after AT_NULL read: got %d, want the default 100", got)
	}
	if got := auxvClockTicks(nil); got != 100 {
		t.Errorf("empty: got %d", got)
	}
	if ticksToDuration(1801, 100) != 18010*time.Millisecond || ticksToDuration(3, 250) != 12*time.Millisecond {
		t.Error("ticks to duration")
	}
}

// The meter subtracts the start from the end per process, leaves out (and
// names) processes it cannot read, and the result divides by answered checks.
func TestCPUMeterArithmetic(t *testing.T) {
	cpu := map[int]time.Duration{1: 2 * time.Second, 2: 5 * time.Second, 3: time.Second}
	m := NewCPUMeter(ProcessCPU{Role: "leader", Name: "n1", PID: 1}, ProcessCPU{Role: "follower", Name: "n2", PID: 2},
		ProcessCPU{Role: "load generator", PID: 3}, ProcessCPU{Role: "redis", PID: 4})
	m.readCPU = func(pid int) (time.Duration, error) {
		if d, ok := cpu[pid]; ok {
			return d, nil
		}
		return 0, errors.New("no such process")
	}
	m.Begin()
	cpu[1] += 530 * time.Millisecond
	cpu[2] += 250 * time.Millisecond
	cpu[3] += 350 * time.Millisecond
	got, err := m.End()
	if err == nil || !strings.Contains(err.Error(), "redis (pid 4): no such process") {
		t.Errorf("error %v: want pid 4 named", err)
	}
	r := Result{Allowed: 9000, Refused: 1000, Errors: 500, CPU: got}
	want := []time.Duration{53 * time.Microsecond, 25 * time.Microsecond, 35 * time.Microsecond}
	if len(got) != 3 {
		t.Fatalf("%d processes, want 3: %+v", len(got), got)
	}
	for i, p := range got {
		if p.PerCheck(r.Answered()) != want[i] {
			t.Errorf("%s: %v per check, want %v", p.Role, p.PerCheck(r.Answered()), want[i])
		}
	}
	if s := cpuString(r, ", "); s != "leader n1 53.0µs, follower n2 25.0µs, load generator 35.0µs" {
		t.Errorf("table row %q", s)
	}
	if s := cpuString(r, " "); s != "leader=53.0µs follower=25.0µs Σ=78.0µs loadgen=35.0µs" {
		t.Errorf("comparison cell %q", s)
	}
	// JSON carries seconds and µs per check, and reads back.
	var buf bytes.Buffer
	if err := WriteJSONLine(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"cpu":[{"role":"leader","name":"n1","pid":1,"cpu_s":0.53,"cpu_per_check_us":53}`) {
		t.Errorf("JSON %s", buf.String())
	}
	back, err := ReadJSONLines(&buf)
	if err != nil || len(back) != 1 || len(back[0].CPU) != 3 || back[0].CPU[1].CPU != 250*time.Millisecond {
		t.Errorf("read back %+v, %v", back, err)
	}
	// Never begun (the run ended in its warm-up): an error, no figures.
	if got, err := NewCPUMeter(ProcessCPU{PID: 1}).End(); err == nil || got != nil {
		t.Errorf("End without Begin: %v, %v", got, err)
	}
}

// Run reads each process's CPU once when the measured interval begins and
// once when the last request is answered, and reports the difference.
func TestRunMeasuresCPU(t *testing.T) {
	f := &fakeTarget{keys: 50, delay: 100 * time.Microsecond}
	w := testWorkload()
	w.Warmup = 50 * time.Millisecond
	w.CPU = NewCPUMeter(ProcessCPU{Role: "load generator", PID: 7})
	var reads []int
	w.CPU.readCPU = func(pid int) (time.Duration, error) {
		reads = append(reads, pid) // Begin and End run one after the other
		return time.Duration(len(reads)) * 1500 * time.Millisecond, nil
	}
	r, err := Run(t.Context(), w, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reads) != 2 || len(r.CPU) != 1 || r.CPU[0].CPU != 1500*time.Millisecond || r.CPUError != "" {
		t.Fatalf("reads %v, CPU %+v, error %q: want one read at each end, 1.5s apart", reads, r.CPU, r.CPUError)
	}
	var buf bytes.Buffer
	WriteTable(&buf, r)
	if !strings.Contains(buf.String(), "CPU per check  load generator ") {
		t.Errorf("table lacks the CPU row:\n%s", buf.String())
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 156067 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000  1000        0 156099 1 0000000000000000 20 4 30 10 -1
   2: 00000000:2070 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 156069 1 0000000000000000 100 0 0 10 0
`
	if got := listeningInodes([]byte(table), 8080); len(got) != 1 || got[0] != "156067" {
		t.Errorf("port 8080: %v, want the listening socket 156067 only", got)
	}
	if got := listeningInodes([]byte(table), 8304); len(got) != 1 || got[0] != "156069" {
		t.Errorf("port 8304: %v", got)
	}
	if got := listeningInodes([]byte(table), 9999); len(got) != 0 {
		t.Errorf("port 9999: %v", got)
	}
	// The real thing: this process's own listener.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := ListeningPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Errorf("ListeningPID = %d, %v; want %d", pid, err, os.Getpid())
	}
}

// The meter's interval is its clock's Begin to End; BusyCPUs divides the
// processes' CPU time by it, and the table and JSON carry it (because a
// latency measured on a shared machine depends on how busy it was).
func TestBusyCPUs(t *testing.T) {
	cpu := map[int]time.Duration{1: time.Second, 2: 3 * time.Second}
	m := NewCPUMeter(ProcessCPU{Role: "leader", Name: "n1", PID: 1}, ProcessCPU{Role: "load generator", PID: 2})
	m.readCPU = func(pid int) (time.Duration, error) { return cpu[pid], nil }
	clock := time.Unix(1000, 0)
	m.now = func() time.Time { return clock }
	if m.Interval() != 0 {
		t.Errorf("interval before End: %v", m.Interval())
	}
	m.Begin()
	clock = clock.Add(4 * time.Second)
	cpu[1] += 5 * time.Second
	cpu[2] += 1200 * time.Millisecond
	got, err := m.End()
	if err != nil {
		t.Fatal(err)
	}
	if m.Interval() != 4*time.Second {
		t.Fatalf("interval %v, want 4s", m.Interval())
	}
	r := Result{Allowed: 1000, CPU: got, CPUInterval: m.Interval(), CPUs: 2}
	if b := r.BusyCPUs(); b != 1.55 { // (5 + 1.2) CPU-seconds over 4 s
		t.Errorf("busy %v CPUs, want 1.55", b)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	if out := squeeze(buf.String()); !strings.Contains(out, "CPU busy 1.55 of 2 CPUs (78%)") {
		t.Errorf("table lacks the busy row:\n%s", out)
	}
	buf.Reset()
	if err := WriteJSONLine(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"cpu_interval_s":4,"cpus":2,"busy_cpus":1.55`) {
		t.Errorf("JSON %s", buf.String())
	}
	back, err := ReadJSONLines(&buf)
	if err != nil || len(back) != 1 || back[0].CPUInterval != 4*time.Second || back[0].CPUs != 2 || back[0].BusyCPUs() != 1.55 {
		t.Errorf("read back %+v, %v", back, err)
	}
	buf.Reset()
	if err := WriteComparison(&buf, []Result{r}, "redis"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "leader=5.00ms loadgen=1.20ms busy=1.55/2") {
		t.Errorf("comparison lacks the busy figure:\n%s", buf.String())
	}
	// Not measured: no row, no figure.
	buf.Reset()
	r.CPUInterval = 0
	WriteTable(&buf, r)
	if strings.Contains(buf.String(), "CPU busy") || r.BusyCPUs() != 0 {
		t.Errorf("busy shown without an interval:\n%s", buf.String())
	}
}
