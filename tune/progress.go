package tune

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar is the progress line `condisagg tune` draws: requests simulated of the run's planned
// total, the simulation that reported last, the rate, elapsed time and an estimate of the rest.
//
// It draws only on a terminal. Redirected to a file or a pipe, its carriage-return redraws are
// noise that ends up in the log; there a Bar draws nothing at all.
type Bar struct {
	w  io.Writer
	on bool
	mu sync.Mutex               // guards pb
	pb *progressbar.ProgressBar // nil until Plan, and for ever when the bar does not draw
}

// barRedraw limits redraws: simulations report every 256 requests, thousands of times a second.
const barRedraw = 100 * time.Millisecond

// NewBar returns a bar on w that draws if show is set and w is a terminal.
func NewBar(w io.Writer, show bool) *Bar {
	return &Bar{w: w, on: show && isTerminal(w)}
}

// isTerminal reports whether w is a terminal (a file descriptor that term.IsTerminal accepts).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// Plan starts the bar with the run's total.
func (b *Bar) Plan(total int) {
	if !b.on || total <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pb = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("req"),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(barRedraw),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }))
}

// Advance adds n requests finished by the simulation label.
func (b *Bar) Advance(label string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb == nil {
		return
	}
	// A fixed width keeps the bar from jumping as parallel simulations take turns.
	b.pb.Describe(fmt.Sprintf("%-36.36s", label))
	_ = b.pb.Add(n) // the only error is a count past the total, which Plan's bound rules out
}

// End closes the bar's line. After a successful run the bar shows 100% even when the sweep
// merged two points and simulated less than planned; after a failed one it stays where it was.
func (b *Bar) End(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb == nil || b.pb.IsFinished() {
		return
	}
	if err == nil {
		_ = b.pb.Finish()
		return
	}
	if b.pb.IsStarted() { // something was drawn: end its line
		_ = b.pb.Exit()
	}
}
