package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	DefaultTailBytes = 64 << 10
	DefaultGrace     = 5 * time.Second
)

// pipeGrace bounds how long the reaper waits, once the process has exited, for its output
// pipe to close: a grandchild that inherited the pipe would otherwise hold Exited open for as
// long as it lives.
const pipeGrace = time.Second

// ErrKilled means Stop had to kill the process: it did not exit within the grace period after
// SIGTERM.
var ErrKilled = errors.New("proc: stop: killed after the grace period")

// Config says what to run and how to supervise it. Path is required; every other field has a
// default.
type Config struct {
	// Name names the process in errors ("vllm-sim decode-0"); default the base name of Path.
	Name string
	// Path is the executable; Args are its arguments (without the program name).
	Path string
	Args []string
	// Env holds NAME=value entries added to the environment the process inherits from its
	// owner; an entry wins over an inherited one of the same name.
	Env []string
	// Group makes Stop, Kill, Pause and Resume signal the process's whole process group (the
	// process and every descendant that stays in its group), not the process alone: for a
	// program that forks workers of its own which must not outlive it (vLLM's API server
	// forks EngineCore and workers). The process's exit ends the group: once it has exited,
	// Stop and Kill kill whatever is left of the group. Not on Windows.
	Group bool
	// Output, if set, receives a copy of everything the process prints (stdout and stderr
	// interleaved), as it is printed.
	Output io.Writer
	// TailBytes bounds the output kept for Output(); default DefaultTailBytes.
	TailBytes int
	// LogLines is how many of the newest output lines are kept parsed for WaitLog; 0 parses
	// none (WaitLog then fails at once), for processes whose output is not slog.
	LogLines int
	// Grace is how long Stop waits after SIGTERM before it kills; default DefaultGrace.
	Grace time.Duration
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	if c.TailBytes == 0 {
		c.TailBytes = DefaultTailBytes
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	return c
}

// Validate reports every problem of c (after its defaults) at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("proc: %s: %v %s", field, value, rule))
	}
	if c.Path == "" {
		bad("path", strconv.Quote(c.Path), "is empty; it must name an executable")
	}
	if c.TailBytes < 0 {
		bad("tail_bytes", c.TailBytes, "is negative")
	}
	if c.LogLines < 0 {
		bad("log_lines", c.LogLines, "is negative")
	}
	if c.Grace < 0 {
		bad("grace", c.Grace, "is negative")
	}
	for i, kv := range c.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			bad(fmt.Sprintf("env[%d]", i), strconv.Quote(kv), "is not NAME=value")
		}
	}
	if c.Group && runtime.GOOS == "windows" {
		bad("group", c.Group, "is not supported on windows (no process groups); leave it false")
	}
	return errors.Join(errs...)
}

// Proc is one running (or exited) child process started by Start.
type Proc struct {
	cfg    Config
	cmd    *exec.Cmd
	out    *output
	done   chan struct{} // closed by reap once the process is reaped and its output drained
	err    error         // cmd.Wait's result; written by reap before done is closed
	paused atomic.Bool   // set by Pause, cleared by Resume and Stop

	stopOnce sync.Once
	stopErr  error // Stop's result; written inside stopOnce
}

// Start starts the process described by cfg. It returns once the process runs; the process
// lives until it exits, Stop or Kill ends it, or (on Linux) the starting thread dies. Start's
// one goroutine reaps the process; it ends when the process does.
func Start(cfg Config) (*Proc, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proc{cfg: cfg, out: newOutput(cfg.TailBytes, cfg.LogLines, cfg.Output), done: make(chan struct{})}
	p.cmd = exec.Command(cfg.Path, cfg.Args...)
	if len(cfg.Env) > 0 {
		// exec keeps the last of duplicate names, so cfg.Env wins over the inherited value.
		p.cmd.Env = append(os.Environ(), cfg.Env...)
	}
	// One comparable writer for both streams: exec then uses one pipe and one copying
	// goroutine, so stdout and stderr lines stay in the order the process wrote them.
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.WaitDelay = pipeGrace
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: start %s (%s): %w", cfg.Name, cfg.Path, err)
	}
	go p.reap()
	return p, nil
}

// reap waits for the process and its output, then publishes the exit.
func (p *Proc) reap() {
	err := p.cmd.Wait()
	p.out.flush()
	p.err = err
	close(p.done)
}

// Name returns the name the process has in errors.
func (p *Proc) Name() string { return p.cfg.Name }

// Pid returns the process id: for reading what the kernel reports about the process (its
// /proc entry: memory, state); signal it through Stop, Kill, Pause and Resume only.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output returns the tail of what the process printed, at most Config.TailBytes.
func (p *Proc) Output() string { return p.out.tail() }

// Exited is closed once the process has exited and its output has been read.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Err returns how the process exited, once Exited is closed: nil for status 0, else
// cmd.Wait's error (an *exec.ExitError carries the status or the signal). Before that it
// returns nil.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Pause stops the process (SIGSTOP) until Resume: it keeps its sockets but answers nothing.
func (p *Proc) Pause() error {
	if err := p.signal(sigStop); err != nil {
		return err
	}
	p.paused.Store(true)
	return nil
}

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error {
	if err := p.signal(sigCont); err != nil {
		return err
	}
	p.paused.Store(false)
	return nil
}

// Paused reports whether the process is stopped by Pause and has neither been resumed nor
// exited.
func (p *Proc) Paused() bool {
	select {
	case <-p.done:
		return false
	default:
		return p.paused.Load()
	}
}

func (p *Proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("proc: signal %v to %s: process has exited", sig, p.cfg.Name)
	default:
	}
	if err := p.send(sig); err != nil {
		return fmt.Errorf("proc: signal %v to %s: %w", sig, p.cfg.Name, err)
	}
	return nil
}

// send delivers sig to the process, or to its process group with Config.Group. Either way a
// process that is gone reads as os.ErrProcessDone.
func (p *Proc) send(sig syscall.Signal) error {
	if p.cfg.Group {
		return signalGroup(p.cmd.Process.Pid, sig)
	}
	return p.cmd.Process.Signal(sig)
}

// endGroup kills what is left of the process group, with Config.Group, once the process has
// exited. The group id stays the process's pid while any member lives, and the kernel gives
// no new process a pid that is still a group id; once the group is empty this finds nothing.
func (p *Proc) endGroup() {
	if p.cfg.Group {
		_ = signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Stop ends the process: SIGTERM (and SIGCONT, in case it is paused), then SIGKILL if it has
// not exited after Config.Grace; where SIGTERM cannot be sent (Windows) it kills at once. With
// Config.Group every signal goes to the process group, and once the process has exited the
// rest of the group is killed: Stop leaves none of it behind. It
// waits until the process is reaped, may be called more than once and from several goroutines,
// and always returns the first call's result:
//   - the process had already exited: Err();
//   - it exited after SIGTERM: nil, unless it exited with a non-zero status (a failed
//     shutdown); dying of the signal itself is the stop it was asked for;
//   - it had to be killed: an error wrapping ErrKilled.
func (p *Proc) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Proc) stop() error {
	select {
	case <-p.done:
		p.endGroup()
		return p.err
	default:
	}
	termErr := p.send(syscall.SIGTERM)
	// A stopped process would keep SIGTERM pending; continuing it lets it handle the signal.
	_ = p.send(sigCont)
	p.paused.Store(false)
	defer p.endGroup()
	if errors.Is(termErr, os.ErrProcessDone) {
		<-p.done
		return p.err
	}
	if termErr == nil {
		t := time.NewTimer(p.cfg.Grace)
		defer t.Stop()
		select {
		case <-p.done:
			return p.exitAfterTerm()
		case <-t.C:
		}
	}
	_ = p.send(syscall.SIGKILL)
	<-p.done
	if termErr != nil {
		return nil
	}
	return fmt.Errorf("%w: %s did not exit within %s of SIGTERM", ErrKilled, p.cfg.Name, p.cfg.Grace)
}

// exitAfterTerm judges an exit that followed Stop's SIGTERM.
func (p *Proc) exitAfterTerm() error {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.ExitCode() > 0 {
		return fmt.Errorf("proc: stop %s: exited with status %d after SIGTERM", p.cfg.Name, ee.ExitCode())
	}
	return nil
}

// Kill ends the process at once (SIGKILL; with Config.Group, the whole group) and waits until
// it is reaped: a crash, not a shutdown. A later Stop returns the kill as the process's exit.
func (p *Proc) Kill() {
	defer p.endGroup()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.send(syscall.SIGKILL)
	<-p.done
}
