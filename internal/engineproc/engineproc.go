// Package engineproc runs the child processes of the real-engine conformance drivers
// (cmd/conformance-vllm, cmd/conformance-pd): each supervised by internal/proc in its own
// process group, so that stopping a vLLM engine reaches its EngineCore and worker too, with its
// output copied to a log file and its process tree's peak RSS sampled for the report; and the
// vLLM engine itself, started by scripts/vllm-engine.sh and waited for on /health.
package engineproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/internal/proc"
	"golang.org/x/sys/unix"
)

// StopGrace is how long a child has to shut down after SIGTERM: the engine stops EngineCore
// and its workers first.
const StopGrace = 30 * time.Second

// Child is a process a driver started.
type Child struct {
	*proc.Proc
	LogPath string
	peak    atomic.Int64 // bytes, sum over the process tree
}

// Start runs path with args and env (added to the driver's environment) in its own process
// group, its output going to logPath.
func Start(name, logPath string, env []string, path string, args ...string) (*Child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Config{Name: name, Path: path, Args: args, Env: env, Output: logf, Group: true, Grace: StopGrace})
	if err != nil {
		logf.Close()
		return nil, err
	}
	c := &Child{Proc: p, LogPath: logPath}
	go func() {
		c.sample()
		logf.Close() // proc has copied all output once Exited is closed
	}()
	return c, nil
}

// HasExited reports whether the process has exited.
func (c *Child) HasExited() bool {
	select {
	case <-c.Exited():
		return true
	default:
		return false
	}
}

// Shutdown ends the child's process group (SIGTERM, SIGKILL after StopGrace; what is left of it
// if the process has already exited). A failed shutdown is worth a line but changes no result;
// an exit before Shutdown (a driver's deliberate kill) is not a shutdown.
func (c *Child) Shutdown() {
	running := !c.HasExited()
	if err := c.Stop(); err != nil && running {
		fmt.Fprintf(os.Stderr, "%s: stop %s: %v (log %s)\n", filepath.Base(os.Args[0]), c.Name(), err, c.LogPath)
	}
}

// PeakRSS is the largest resident set of the process tree seen so far, in bytes.
func (c *Child) PeakRSS() int64 { return c.peak.Load() }

// sample adds up the RSS of the process and its descendants every half second until the
// process exits.
func (c *Child) sample() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if rss := TreeRSS(c.Pid()); rss > c.peak.Load() {
			c.peak.Store(rss)
		}
		select {
		case <-c.Exited():
			return
		case <-t.C:
		}
	}
}

// TreeRSS is the resident set of pid and all its descendants, from /proc.
func TreeRSS(pid int) int64 {
	var total int64
	for _, p := range treePids(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			total += pages * int64(os.Getpagesize())
		}
	}
	return total
}

// Engine describes one vLLM engine for scripts/vllm-engine.sh.
type Engine struct {
	Root                     string // repository root
	Name                     string // the child's name and its log file's stem
	LogDir                   string
	Model, ServedName        string
	Port, KVPort, ReplayPort int
	Blocks, MaxModelLen      int
	Env                      []string // added to the engine's environment
	Extra                    []string // vLLM flags after --
	StartTimeout             time.Duration
	// CPUs, when set (taskset's list syntax, "0" or "2-3"), pins the engine's whole process
	// tree to those cores (taskset at start, PinTree again once it is healthy) and binds its
	// OpenMP threads to them (VLLM_CPU_OMP_THREADS_BIND), so that two engines on one host do
	// not share a core.
	CPUs string
}

// StartEngine starts e and waits until it answers /health.
func StartEngine(ctx context.Context, e Engine) (*Child, error) {
	args := []string{filepath.Join(e.Root, "scripts/vllm-engine.sh"), "--model", e.Model, "--name", e.ServedName,
		"--port", strconv.Itoa(e.Port), "--kv-port", strconv.Itoa(e.KVPort), "--replay-port", strconv.Itoa(e.ReplayPort),
		"--blocks", strconv.Itoa(e.Blocks), "--max-model-len", strconv.Itoa(e.MaxModelLen)}
	if len(e.Extra) > 0 {
		args = append(append(args, "--"), e.Extra...)
	}
	env := append([]string{"VLLM_SERVER_DEV_MODE=1"}, e.Env...)
	path := "bash"
	if e.CPUs != "" {
		path, args = "taskset", append([]string{"-c", e.CPUs, "bash"}, args...)
		env = append(env, "VLLM_CPU_OMP_THREADS_BIND="+e.CPUs)
	}
	c, err := Start(e.Name, filepath.Join(e.LogDir, e.Name+".log"), env, path, args...)
	if err != nil {
		return nil, err
	}
	if err := WaitHealthy(ctx, c, fmt.Sprintf("http://127.0.0.1:%d/health", e.Port), e.StartTimeout); err != nil || e.CPUs == "" {
		return c, err
	}
	cpus, err := parseCPUList(e.CPUs)
	if err != nil {
		return c, err
	}
	return c, PinTree(c.Pid(), cpus)
}

// WaitHealthy polls url until it answers 200, the child exits or timeout passes.
func WaitHealthy(ctx context.Context, c *Child, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		if c.HasExited() {
			return fmt.Errorf("%s exited during startup; log: %s\n%s", c.Name(), c.LogPath, LastLines(c.Output(), 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not healthy after %s; log: %s", c.Name(), timeout, c.LogPath)
		}
		time.Sleep(time.Second)
	}
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// PinTree sets the CPU affinity of every thread of pid and of its descendants to cpus. vLLM
// 0.32's NixlConnector on a CPU engine moves its worker's main thread to the last core of each
// NUMA node at start (nixl/base_worker.py, "reserve different cores for start_load_kv()"),
// whatever taskset gave the process: two pinned engines would then share that core. Threads
// started later inherit the mask of the thread that starts them.
func PinTree(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	var errs []error
	for _, p := range treePids(pid) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			continue // exited meanwhile
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("pin thread %d of %d: %w", tid, p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// treePids is pid and all its descendants, from /proc.
func treePids(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], n)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// parseCPUList parses taskset's list syntax: "0", "0,2", "1-3".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= 1024 {
			return nil, fmt.Errorf("engine CPUs %q: %q must be a core or a range like 2-3", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
