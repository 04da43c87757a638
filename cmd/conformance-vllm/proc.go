package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child in its own process group, so that stopping it reaches the engine's
// EngineCore and worker children too; a sampler keeps the group's peak RSS.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	peak int64 // bytes, sum over the process tree
}

func startProc(name, logPath string, args []string, env []string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	go p.sample()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// sample adds up the RSS of the process and its descendants every half second.
func (p *proc) sample() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if rss := treeRSS(p.cmd.Process.Pid); rss > 0 {
			p.mu.Lock()
			p.peak = max(p.peak, rss)
			p.mu.Unlock()
		}
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

func (p *proc) peakRSS() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.peak }

// stop sends SIGTERM to the group, then SIGKILL after 30 s.
func (p *proc) stop() { p.signal(syscall.SIGTERM, 30*time.Second) }

func (p *proc) signal(sig syscall.Signal, grace time.Duration) {
	if p.exited() {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
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

func startEngine(ctx context.Context, c *config) (*proc, error) {
	args := []string{"bash", filepath.Join(c.root, "scripts/vllm-engine.sh"), "--model", c.model, "--name", modelName,
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
	logPath := filepath.Join(c.workdir, "engine.log")
	p, err := startProc("engine", logPath, args, []string{"VLLM_SERVER_DEV_MODE=1"})
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
			return p, fmt.Errorf("engine exited during startup; log: %s\n%s", logPath, tail(logPath, 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return p, fmt.Errorf("engine not healthy after %s; log: %s", c.engineStartTimeout, logPath)
		}
		time.Sleep(time.Second)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
