package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/condisagg/condisagg/internal/proc"
)

// stopGrace is how long a child has to shut down after SIGTERM: the engine stops EngineCore
// and its workers first.
const stopGrace = 30 * time.Second

// child is a process the driver started: supervised by internal/proc in its own process
// group, signalled as a group so that stopping the engine reaches its EngineCore and worker
// too; its output goes to a log file in the workdir, and its process tree's peak RSS is
// sampled for the report.
type child struct {
	*proc.Proc
	logPath string
	peak    atomic.Int64 // bytes, sum over the process tree
}

func startChild(name, logPath string, env []string, path string, args ...string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Config{Name: name, Path: path, Args: args, Env: env, Output: logf, Group: true, Grace: stopGrace})
	if err != nil {
		logf.Close()
		return nil, err
	}
	c := &child{Proc: p, logPath: logPath}
	go func() {
		c.sample()
		logf.Close() // proc has copied all output once Exited is closed
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.Exited():
		return true
	default:
		return false
	}
}

// stop ends the child's process group (SIGTERM, SIGKILL after stopGrace; what is left of it
// if the process has already exited). A failed shutdown is worth a line but changes no
// result; an exit before stop (the engine restart's kill) is not a shutdown.
func (c *child) stop() {
	running := !c.exited()
	if err := c.Stop(); err != nil && running {
		fmt.Fprintf(os.Stderr, "conformance-vllm: stop %s: %v (log %s)\n", c.Name(), err, c.logPath)
	}
}

func (c *child) peakRSS() int64 { return c.peak.Load() }

// sample adds up the RSS of the process and its descendants every half second until the
// process exits.
func (c *child) sample() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if rss := treeRSS(c.Pid()); rss > c.peak.Load() {
			c.peak.Store(rss)
		}
		select {
		case <-c.Exited():
			return
		case <-t.C:
		}
	}
}

// treeRSS is the resident set of pid and all its descendants, from /proc.
func treeRSS(pid int) int64 {
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
		f := strings.Fields(s[i+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], n)
		}
	}
	var total int64
	var walk func(int)
	walk = func(p int) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p))
		if err == nil {
			f := strings.Fields(string(b))
			if len(f) > 1 {
				pages, _ := strconv.ParseInt(f[1], 10, 64)
				total += pages * int64(os.Getpagesize())
			}
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return total
}

func startEngine(ctx context.Context, c *config) (*child, error) {
	args := []string{filepath.Join(c.root, "scripts/vllm-engine.sh"), "--model", c.model, "--name", modelName,
		"--port", strconv.Itoa(c.port), "--kv-port", strconv.Itoa(c.kvPort), "--replay-port", strconv.Itoa(c.replayPort),
		"--blocks", strconv.Itoa(c.blocks), "--max-model-len", strconv.Itoa(c.maxLen)}
	var extra []string
	if c.dp > 1 {
		extra = append(extra, "--data-parallel-size", strconv.Itoa(c.dp))
	}
	if c.lora {
		// As established in docs/vllm-facts.md §d: a rank-8 adapter, one LoRA slot.
		extra = append(extra, "--enable-lora", "--lora-modules", loraName+"="+c.loraDir, "--max-lora-rank", "8", "--max-loras", "1")
	}
	if len(extra) > 0 {
		args = append(append(args, "--"), extra...)
	}
	p, err := startChild("engine", filepath.Join(c.workdir, "engine.log"), []string{"VLLM_SERVER_DEV_MODE=1"}, "bash", args...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(c.engineStartTimeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/health", c.port)
	for {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return p, nil
			}
		}
		if p.exited() {
			return p, fmt.Errorf("engine exited during startup; log: %s\n%s", p.logPath, lastLines(p.Output(), 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("engine not healthy after %s; log: %s", c.engineStartTimeout, p.logPath)
		}
		time.Sleep(time.Second)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
