package tune

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Bar draws one line on w: done of total simulated requests over all simulations of a run.
type Bar struct {
	mu          sync.Mutex // guards everything below
	w           io.Writer
	on, drawn   bool
	total, done int
	lastPermil  int
	start       time.Time
}

// NewBar returns a bar that draws on w when on is set.
func NewBar(w io.Writer, on bool) *Bar {
	return &Bar{w: w, on: on, start: time.Now(), lastPermil: -1}
}

// Plan sets the total.
func (p *Bar) Plan(n int) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

// Advance adds n finished requests of the simulation label.
func (p *Bar) Advance(label string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if !p.on || p.total == 0 {
		return
	}
	permil := min(p.done*1000/p.total, 1000)
	if permil == p.lastPermil {
		return
	}
	p.lastPermil = permil
	const width = 30
	fill := permil * width / 1000
	fmt.Fprintf(p.w, "\rtune [%s%s] %5.1f%%  %6.0fs  %-40.40s", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		float64(permil)/10, time.Since(p.start).Seconds(), label)
	p.drawn = true
}

// Finish ends the bar's line.
func (p *Bar) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
