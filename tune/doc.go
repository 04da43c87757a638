// Package tune chooses conditional-disaggregation thresholds for a workload by simulating it:
// one run per routing mode, then a threshold sweep, summarised as a Report with recommended
// thresholds, text and JSON output and SVG plots.
//
// A run (Run) simulates the workload with cluster.Run, the fleet simulator that routes with the
// production policy, pool and index code: first an always-remote probe that previews each
// request on the decode pool (the eff and ratio distributions, whose quartiles the sweep tries),
// then the fixed modes (aggregated on the decode pool and on every GPU,
// disaggregated, and each conditional policy at its defaults), then, unless Config.NoSweep, a
// three-stage sweep: eff_isl_threshold at the default ratio, the ratio at the best T, and
// isl_or_load with each θp at the best (T, R). The best point has the highest goodput; ties go
// to the lower TTFT p90, then TPOT p99. With Config.RoleAdvice (roles.go) it also runs every
// policy on every prefill:decode split, searches the fewest GPUs on which the slo policy still
// serves the best goodput, and checks the live service's analytic role advice against the
// always-disaggregated splits.
//
// Invariants: a run is deterministic for a Config and a Workload (the seed is in the Config),
// and every Report records what reproduces it: the seed, the source commit (Commit) and the
// command's flags with their effective values (Options.Flags). Config.Validate reports every
// problem at once, each named by the `condisagg tune` flag that sets the field.
//
// Concurrency: Run starts at most Config.Parallel simulations at once and waits for every one
// before it returns; it calls Progress.Advance from those goroutines. A Report is not safe for
// concurrent mutation.
//
// Command and MatrixCommand are the `condisagg tune` and `condisagg matrix` commands, flags
// included; cmd/condisagg only dispatches to them.
//
// Imports: cluster and workload, plus the value types cluster.Config carries (policy, sim),
// route, feedback (the analytic role advice) and internal/flaglist; never extproc, kvevents, tokenizer or cmd.
package tune
