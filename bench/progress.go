package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// IsTerminal reports whether w is a terminal, where a live progress bar makes
// sense (not a pipe, a file or a test buffer).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ProgressBar shows elapsed time, checks/s and p99 so far while a run goes on.
type ProgressBar struct {
	bar *progressbar.ProgressBar
}

// NewProgressBar returns a bar over the run's total time (warm-up included)
// drawn on w.
func NewProgressBar(w io.Writer, total time.Duration) *ProgressBar {
	bar := progressbar.NewOptions64(total.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(false), // the description carries it, in a readable unit
		progressbar.OptionSetDescription(describe(Progress{Total: total, Warmup: true})),
		progressbar.OptionClearOnFinish(),
	)
	return &ProgressBar{bar: bar}
}

// Update is a Run onProgress callback.
func (p *ProgressBar) Update(pr Progress) {
	p.bar.Describe(describe(pr))
	p.bar.Set64(min(pr.Elapsed.Milliseconds(), pr.Total.Milliseconds()))
}

// Finish clears the bar so the report starts on a clean line.
func (p *ProgressBar) Finish() {
	p.bar.Finish()
	p.bar.Clear()
}

func describe(p Progress) string {
	elapsed := fmt.Sprintf("%4.1fs/%s", p.Elapsed.Seconds(), p.Total.Round(100*time.Millisecond))
	if p.Warmup {
		return elapsed + "  warming up"
	}
	s := fmt.Sprintf("%s  %s checks/s  p99 %s", elapsed, formatInt(int64(math.Round(p.ChecksPerSec))), fmtDuration(p.P99))
	if p.Errors > 0 {
		s += fmt.Sprintf("  errors %s", formatInt(p.Errors))
	}
	return s
}
