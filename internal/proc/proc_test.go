package proc

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// startSh runs script under sh -c and stops it when the test ends.
func startSh(t *testing.T, cfg Config, script string) *Proc {
	t.Helper()
	cfg.Path, cfg.Args = "sh", []string{"-c", script}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// exited waits for p's exit; a bound keeps a broken test from hanging the run.
func exited(t *testing.T, p *Proc) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit; output:\n%s", p.Name(), p.Output())
	}
}

// ready waits until the script has logged msg=ready, so its traps are in place.
func ready(t *testing.T, p *Proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitLog(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{"defaults_fill_everything_but_path", Config{Path: "sleep"}, nil},
		{"path_is_required", Config{}, []string{`proc: path: "" is empty`}},
		{"every_problem_at_once", Config{Path: "x", TailBytes: -1, LogLines: -2, Grace: -time.Second},
			[]string{"tail_bytes: -1 is negative", "log_lines: -2 is negative", "grace: -1s is negative"}},
		{"env_entries_are_name_value", Config{Path: "x", Env: []string{"A=1", "B=", "NOVALUE", "=2"}},
			[]string{`env[2]: "NOVALUE" is not NAME=value`, `env[3]: "=2" is not NAME=value`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.withDefaults().Validate()
			if len(c.want) == 0 && err != nil {
				t.Fatalf("Validate = %v; want nil", err)
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestStartFailsOnMissingExecutable(t *testing.T) {
	_, err := Start(Config{Name: "ghost", Path: "/nonexistent/ghost"})
	if err == nil || !strings.Contains(err.Error(), "proc: start ghost (/nonexistent/ghost)") {
		t.Fatalf("Start = %v; want an error naming the process and its path", err)
	}
}

// TestEnvIsAddedToTheInherited: Env adds to the owner's environment and wins over an
// inherited name.
func TestEnvIsAddedToTheInherited(t *testing.T) {
	t.Setenv("PROC_TEST_INHERITED", "kept")
	t.Setenv("PROC_TEST_OVERRIDDEN", "owner")
	p := startSh(t, Config{Env: []string{"PROC_TEST_ADDED=42", "PROC_TEST_OVERRIDDEN=child"}},
		`echo "$PROC_TEST_INHERITED $PROC_TEST_OVERRIDDEN $PROC_TEST_ADDED"`)
	exited(t, p)
	if got, want := p.Output(), "kept child 42\n"; got != want {
		t.Errorf("child printed %q; want %q", got, want)
	}
}

func TestOutputKeepsBoundedTailAndCopiesAll(t *testing.T) {
	var all bytes.Buffer // read only after Exited, once exec's copying goroutine has finished
	p := startSh(t, Config{TailBytes: 64, Output: &all},
		`i=1; while [ $i -le 1000 ]; do echo "line$i"; i=$((i+1)); done; echo err-line >&2`)
	exited(t, p)
	got := p.Output()
	if len(got) != 64 || !strings.HasSuffix(got, "line999\nline1000\nerr-line\n") {
		t.Errorf("tail = %q (%d bytes); want the last 64 bytes, ending with stderr's line", got, len(got))
	}
	if n := strings.Count(all.String(), "\n"); n != 1001 || !strings.HasPrefix(all.String(), "line1\nline2\n") {
		t.Errorf("Output copy has %d lines starting %.20q; want all 1001 from the first", n, all.String())
	}
}

func TestTailKeepsTheEndUnderConcurrentWrites(t *testing.T) {
	o := newOutput(8, 0, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _, _ = o.Write([]byte("0123456789")) })
	}
	wg.Wait()
	if got := o.tail(); got != "23456789" {
		t.Errorf("tail = %q; want the last 8 bytes %q", got, "23456789")
	}
}

func TestWaitLog(t *testing.T) {
	for _, c := range []struct {
		name     string
		logLines int
		script   string
		exit     bool // wait for the exit before WaitLog
		msg      string
		want     map[string]string
		wantErr  string
	}{
		{name: "text_line_logged_before_the_call", logLines: 16,
			script: `echo 'time=t level=INFO msg="sim listening" endpoint=127.0.0.1:9 note="a \"b\" c"'; exec sleep 60`,
			msg:    "sim listening", want: map[string]string{"endpoint": "127.0.0.1:9", "note": `a "b" c`}},
		{name: "json_line_numbers_keep_their_text", logLines: 16,
			script: `sleep 0.2; echo '{"level":"INFO","msg":"serving","port":8000,"admin":"127.0.0.1:7"}'; exec sleep 60`,
			msg:    "serving", want: map[string]string{"port": "8000", "admin": "127.0.0.1:7"}},
		{name: "last_line_without_newline_counts", logLines: 16, exit: true,
			script: `printf 'msg=done code=0'`, msg: "done", want: map[string]string{"code": "0"}},
		{name: "exit_without_the_line_fails_with_output", logLines: 16,
			script: `echo msg=other; exit 3`, msg: "serving", wantErr: "exited (exit status 3) before logging \"serving\":\nmsg=other"},
		{name: "only_the_newest_lines_are_kept", logLines: 2, exit: true,
			script: `echo msg=a; echo msg=b; echo msg=c`, msg: "a", wantErr: "before logging \"a\""},
		{name: "kept_line_after_dropped_ones", logLines: 2, exit: true,
			script: `echo msg=a; echo msg=b; echo msg=c x=1`, msg: "c", want: map[string]string{"x": "1"}},
		{name: "lines_not_parsed_fails_at_once", logLines: 0,
			script: `echo msg=ready; exec sleep 60`, msg: "ready", wantErr: "lines are not parsed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startSh(t, Config{LogLines: c.logLines}, c.script)
			if c.exit {
				exited(t, p)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, err := p.WaitLog(ctx, c.msg)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("WaitLog = %v, %v; want an error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("attribute %s = %q; want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func TestWaitLogEndsWithContext(t *testing.T) {
	p := startSh(t, Config{LogLines: 16}, `echo msg=other; exec sleep 60`)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := p.WaitLog(ctx, "never")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "msg=other") {
		t.Fatalf("WaitLog = %v; want the deadline, with the output", err)
	}
}

func TestStop(t *testing.T) {
	const ignoresTerm = `trap "" TERM; echo msg=ready; exec sleep 60` // sleep inherits the ignored TERM
	for _, c := range []struct {
		name   string
		script string
		grace  time.Duration
		before func(t *testing.T, p *Proc)
		check  func(t *testing.T, err error, took time.Duration)
	}{
		{name: "exits_on_SIGTERM_is_clean", script: `echo msg=ready; exec sleep 60`, grace: 10 * time.Second,
			check: func(t *testing.T, err error, _ time.Duration) {
				if err != nil {
					t.Errorf("Stop = %v; want nil", err)
				}
			}},
		{name: "ignores_SIGTERM_killed_after_grace", script: ignoresTerm, grace: 300 * time.Millisecond,
			check: func(t *testing.T, err error, took time.Duration) {
				if !errors.Is(err, ErrKilled) || took < 300*time.Millisecond {
					t.Errorf("Stop = %v after %s; want ErrKilled after the 300ms grace", err, took)
				}
			}},
		{name: "paused_is_continued_so_its_handler_runs",
			script: `trap "exit 0" TERM; echo msg=ready; while :; do sleep 0.05; done`, grace: 10 * time.Second,
			before: func(t *testing.T, p *Proc) {
				if err := p.Pause(); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, err error, _ time.Duration) {
				if err != nil {
					t.Errorf("Stop = %v; want nil (the TERM handler exits 0)", err)
				}
			}},
		{name: "non_zero_exit_after_SIGTERM_is_a_failed_shutdown",
			script: `trap "exit 4" TERM; echo msg=ready; while :; do sleep 0.05; done`, grace: 10 * time.Second,
			check: func(t *testing.T, err error, _ time.Duration) {
				if err == nil || errors.Is(err, ErrKilled) || !strings.Contains(err.Error(), "exited with status 4 after SIGTERM") {
					t.Errorf("Stop = %v; want the status-4 exit", err)
				}
			}},
		{name: "already_exited_returns_its_exit", script: `echo msg=ready; exit 3`, grace: 10 * time.Second,
			before: func(t *testing.T, p *Proc) { exited(t, p) },
			check: func(t *testing.T, err error, _ time.Duration) {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Errorf("Stop = %v; want exit status 3", err)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startSh(t, Config{LogLines: 16, Grace: c.grace}, c.script)
			ready(t, p)
			if c.before != nil {
				c.before(t, p)
			}
			start := time.Now()
			err := p.Stop()
			c.check(t, err, time.Since(start))
			if p.Paused() {
				t.Error("Paused after Stop")
			}
			if again := p.Stop(); again != err {
				t.Errorf("second Stop = %v; want the first's %v", again, err)
			}
		})
	}
}

func TestConcurrentStopsShareOneResult(t *testing.T) {
	p := startSh(t, Config{LogLines: 16, Grace: 200 * time.Millisecond}, `trap "" TERM; echo msg=ready; exec sleep 60`)
	ready(t, p)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = p.Stop() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != errs[0] || !errors.Is(err, ErrKilled) {
			t.Errorf("Stop #%d = %v; want the one ErrKilled result %v", i, err, errs[0])
		}
	}
	p.Kill() // a no-op once exited
}

func TestKillIsACrash(t *testing.T) {
	p := startSh(t, Config{LogLines: 16, Grace: time.Minute}, `trap "" TERM; echo msg=ready; exec sleep 60`)
	ready(t, p)
	start := time.Now()
	p.Kill()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Kill took %s; want no grace period", took)
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != -1 || !strings.Contains(ee.Error(), "killed") {
		t.Errorf("Err after Kill = %v; want death by SIGKILL", p.Err())
	}
	if err := p.Stop(); err != p.Err() {
		t.Errorf("Stop after Kill = %v; want the kill %v", err, p.Err())
	}
	if err := p.Pause(); err == nil || !strings.Contains(err.Error(), "has exited") {
		t.Errorf("Pause after exit = %v; want an error", err)
	}
}
