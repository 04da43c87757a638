package proc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
)

// maxLineBytes bounds one parsed line; the rest of a longer line is dropped, as no start-up
// line worth waiting for is that long.
const maxLineBytes = 64 << 10

// output is the process's stdout and stderr: exec's copying goroutine writes it, any caller
// reads its tail and parsed lines.
type output struct {
	mirror  io.Writer // Config.Output or nil; written only from Write, which exec serialises
	maxTail int       // Config.TailBytes

	mu      sync.Mutex    // guards buf, partial, lines, wake
	buf     []byte        // the tail, at most maxTail bytes
	partial []byte        // the unfinished last line, when lines are parsed
	lines   lineRing      // the newest parsed lines
	wake    chan struct{} // closed and replaced whenever a line is parsed
}

func newOutput(tailBytes, logLines int, mirror io.Writer) *output {
	return &output{mirror: mirror, maxTail: tailBytes, lines: lineRing{max: logLines}, wake: make(chan struct{})}
}

// Write keeps b in the tail, parses the lines it completes and copies it to Config.Output. It
// never fails, so a slow or failing copy cannot stall or kill the process.
func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	o.buf = append(o.buf, b...)
	if over := len(o.buf) - o.maxTail; over > 0 {
		o.buf = append(o.buf[:0], o.buf[over:]...)
	}
	if o.lines.max > 0 && o.addLines(b) {
		close(o.wake)
		o.wake = make(chan struct{})
	}
	o.mu.Unlock()
	if o.mirror != nil {
		_, _ = o.mirror.Write(b)
	}
	return len(b), nil
}

// addLines parses every line b completes and reports whether there was one; o.mu is held.
func (o *output) addLines(b []byte) bool {
	added := false
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			o.appendPartial(b)
			return added
		}
		o.appendPartial(b[:i])
		o.lines.add(parseLogLine(string(o.partial)))
		o.partial, b, added = o.partial[:0], b[i+1:], true
	}
}

func (o *output) appendPartial(b []byte) {
	o.partial = append(o.partial, b[:min(len(b), maxLineBytes-len(o.partial))]...)
}

// flush parses a last line that ended without a newline; reap calls it once the output is
// drained.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 && o.lines.max > 0 {
		o.lines.add(parseLogLine(string(o.partial)))
		o.partial = o.partial[:0]
		close(o.wake)
		o.wake = make(chan struct{})
	}
}

func (o *output) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// find looks for a line with message msg among the lines numbered *seen and later, advancing
// *seen past the lines it read. It returns that line's attributes, or the channel that is
// closed when the next line arrives.
func (o *output) find(msg string, seen *int) (map[string]string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*seen = max(*seen, o.lines.oldest())
	for ; *seen < o.lines.total; *seen++ {
		if l := o.lines.at(*seen); l.msg == msg {
			*seen++
			return maps.Clone(l.attrs), nil
		}
	}
	return nil, o.wake
}

// lineRing keeps the newest max parsed lines; line n (counted from 0 since start) is at
// buf[n%max] while n >= total-len(buf).
type lineRing struct {
	buf   []logLine
	max   int
	total int // lines ever added
}

func (r *lineRing) add(l logLine) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, l)
	} else {
		r.buf[r.total%r.max] = l
	}
	r.total++
}

func (r *lineRing) oldest() int { return r.total - len(r.buf) }

func (r *lineRing) at(n int) logLine { return r.buf[n%r.max] }

// WaitLog waits until the process logs a line whose message is msg and returns that line's
// attributes (slog text or JSON, values as text). Lines logged before the call count, as long
// as they are among the newest Config.LogLines. It fails when ctx ends, when the process exits
// without such a line, or at once if Config.LogLines is 0; the error carries the output tail.
func (p *Proc) WaitLog(ctx context.Context, msg string) (map[string]string, error) {
	if p.cfg.LogLines == 0 {
		return nil, fmt.Errorf("proc: %s: wait for log %q: lines are not parsed (log_lines is 0)", p.cfg.Name, msg)
	}
	seen := 0
	for {
		attrs, wake := p.out.find(msg, &seen)
		if wake == nil {
			return attrs, nil
		}
		select {
		case <-wake:
		case <-p.done:
			// reap parsed the last line before closing done: one more look sees everything.
			if attrs, wake := p.out.find(msg, &seen); wake == nil {
				return attrs, nil
			}
			return nil, fmt.Errorf("proc: %s exited (%v) before logging %q:\n%s", p.cfg.Name, p.err, msg, p.Output())
		case <-ctx.Done():
			return nil, fmt.Errorf("proc: %s: wait for log %q: %w\n%s", p.cfg.Name, msg, ctx.Err(), p.Output())
		}
	}
}
