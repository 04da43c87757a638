package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxOutputBytes bounds the output kept per process (the tail is kept).
const maxOutputBytes = 64 << 10

// stopGrace is how long Stop waits after SIGTERM before it kills.
const stopGrace = 5 * time.Second

// Proc is one external process of the stack (vllm-sim, pd-sidecar, condisagg). It keeps the
// tail of its output and the key=value attributes of its log lines, so a caller can wait for
// a line such as "vllm-sim listening" and read the addresses it names.
type Proc struct {
	Name   string
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited and its output is drained
	err    error         // Wait's result; read after done
	paused atomic.Bool   // set by Pause, cleared by Resume

	mu    sync.Mutex    // guards out, lines, wake
	out   []byte        // output tail, at most maxOutputBytes
	lines []logLine     // parsed log lines, at most maxLogLines
	wake  chan struct{} // closed and replaced on every new line
}

// maxLogLines bounds the parsed log lines kept per process.
const maxLogLines = 4096

// logLine is one log line: its message and attributes (slog text or JSON form).
type logLine struct {
	msg   string
	attrs map[string]string
}

// StartProc starts bin with args; its stdout and stderr are captured.
func StartProc(name, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, done: make(chan struct{}), wake: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.SysProcAttr = procAttr()
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("e2e: start %s (%s): %w", name, bin, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.read(r) })
	go func() {
		p.err = p.cmd.Wait()
		_ = w.Close()
		wg.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *Proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.out = append(p.out, line...)
		p.out = append(p.out, '\n')
		if len(p.out) > maxOutputBytes {
			p.out = append(p.out[:0:0], p.out[len(p.out)-maxOutputBytes:]...)
		}
		if len(p.lines) < maxLogLines {
			p.lines = append(p.lines, parseLogLine(line))
		}
		close(p.wake)
		p.wake = make(chan struct{})
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// parseLogLine reads a slog JSON or text line into its message and attributes.
func parseLogLine(line string) logLine {
	l := logLine{attrs: map[string]string{}}
	if strings.HasPrefix(line, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			for k, v := range m {
				l.attrs[k] = fmt.Sprint(v)
			}
			l.msg = l.attrs["msg"]
			return l
		}
	}
	for rest := line; rest != ""; {
		rest = strings.TrimLeft(rest, " ")
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		if strings.HasPrefix(v, `"`) {
			end := 1
			for end < len(v) && (v[end] != '"' || v[end-1] == '\\') {
				end++
			}
			l.attrs[k] = strings.ReplaceAll(v[1:min(end, len(v))], `\"`, `"`)
			rest = v[min(end+1, len(v)):]
		} else {
			val, r, _ := strings.Cut(v, " ")
			l.attrs[k] = val
			rest = r
		}
	}
	l.msg = l.attrs["msg"]
	return l
}

// WaitLog waits until the process logs a line with message msg and returns its attributes.
func (p *Proc) WaitLog(ctx context.Context, msg string) (map[string]string, error) {
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if p.lines[seen].msg == msg {
				a := p.lines[seen].attrs
				p.mu.Unlock()
				return a, nil
			}
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-p.done:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if seen >= n {
				return nil, fmt.Errorf("e2e: %s exited (%v) before logging %q:\n%s", p.Name, p.err, msg, p.Output())
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("e2e: %s: waiting for log %q: %w\n%s", p.Name, msg, ctx.Err(), p.Output())
		}
	}
}

// Output returns the tail of what the process printed.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(bytes.Clone(p.out))
}

// Exited is closed once the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Pause stops the process (SIGSTOP) until Resume: it keeps its sockets but answers nothing.
func (p *Proc) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.paused.Store(true)
	return nil
}

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	p.paused.Store(false)
	return nil
}

// Paused reports whether the process is stopped by Pause.
func (p *Proc) Paused() bool { return p.paused.Load() }

func (p *Proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("e2e: signal %v to %s: process has exited", sig, p.Name)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("e2e: signal %v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Stop ends the process: SIGCONT (in case it is paused) and SIGTERM, then SIGKILL after
// stopGrace. It waits for the exit and is safe to call more than once.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process at once (SIGKILL) and waits for it: a crash, not a shutdown.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
