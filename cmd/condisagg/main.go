// Command condisagg is the conditional-disaggregation router: `serve` runs the Envoy ext_proc
// server; `explain`, `workers`, `recent` and `shadow` query a running router's Admin API and
// `reset-prefix-cache` resets a worker's engine cache through it; `tune` simulates a workload to
// choose thresholds; `calibrate` measures a live engine and writes its cost model file.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/condisagg/condisagg/calibrate/engine"
	"github.com/condisagg/condisagg/internal/version"
	"github.com/condisagg/condisagg/server"
	"github.com/condisagg/condisagg/tune"
)

const usage = `usage: condisagg <command> [flags]

commands:
  serve     run the ext_proc router (--config file.yaml, Dynamo-compatible --router-* flags)
  explain   show the decision for a request without booking it (--addr, --path, --body @file)
  workers   list workers with load and KV event stream state (--addr)
  recent    the last routed decisions with their KV transfer outcome (transferred, recomputed, ...) (--addr, -n)
  shadow    compare the candidate config (router.shadow_disagg_config) with the live one; --promote makes it live
  reset-prefix-cache WORKER
            reset the worker's engine prefix cache (vLLM POST /reset_prefix_cache) and clear its index at once
  tune      simulate a workload per routing mode and suggest thresholds
  matrix    the evaluation matrix: workloads x fleets x SLOs, baselines against the slo policy
  calibrate measure a live engine and write its cost model file (--endpoint, --model, -o model.yaml)
  version   print the version and VCS revision (also --version)

Run "condisagg <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if version.Requested(args) {
		fmt.Fprintln(stdout, version.String("condisagg"))
		return 0
	}
	switch args[0] {
	case "serve":
		return server.Run(ctx, args[1:], stderr, server.Hooks{})
	case "explain":
		return runExplain(ctx, args[1:], stdout, stderr)
	case "workers":
		return runWorkers(ctx, args[1:], stdout, stderr)
	case "recent":
		return runRecent(ctx, args[1:], stdout, stderr)
	case "shadow":
		return runShadow(ctx, args[1:], stdout, stderr)
	case "reset-prefix-cache":
		return runResetPrefixCache(ctx, args[1:], stdout, stderr)
	case "tune":
		return tune.Command(ctx, args[1:], stdout, stderr)
	case "matrix":
		return tune.MatrixCommand(ctx, args[1:], stdout, stderr)
	case "calibrate":
		return engine.Command(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "condisagg: unknown command %q\n\n%s", args[0], usage)
	return 2
}
