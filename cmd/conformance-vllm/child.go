package main

import (
	"context"
	"strconv"

	"github.com/condisagg/condisagg/internal/engineproc"
)

// child is a process the driver started (internal/engineproc): its own process group, its
// output in a log file of the workdir, its process tree's peak RSS sampled for the report.
type child = engineproc.Child

func startChild(name, logPath string, env []string, path string, args ...string) (*child, error) {
	return engineproc.Start(name, logPath, env, path, args...)
}

func lastLines(s string, n int) string { return engineproc.LastLines(s, n) }

func startEngine(ctx context.Context, c *config) (*child, error) {
	var extra []string
	if c.dp > 1 {
		extra = append(extra, "--data-parallel-size", strconv.Itoa(c.dp))
	}
	if c.lora {
		// As established in docs/vllm-facts.md §d: a rank-8 adapter, one LoRA slot.
		extra = append(extra, "--enable-lora", "--lora-modules", loraName+"="+c.loraDir, "--max-lora-rank", "8", "--max-loras", "1")
	}
	return engineproc.StartEngine(ctx, engineproc.Engine{Root: c.root, Name: "engine", LogDir: c.workdir,
		Model: c.model, ServedName: modelName, Port: c.port, KVPort: c.kvPort, ReplayPort: c.replayPort,
		Blocks: c.blocks, MaxModelLen: c.maxLen, Extra: extra, StartTimeout: c.engineStartTimeout})
}
