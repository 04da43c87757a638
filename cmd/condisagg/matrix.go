package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/condisagg/condisagg/internal/flaglist"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/tune"
)

// runMatrix is `condisagg matrix`: the evaluation matrix of workloads × fleets × SLOs
// (package tune, RunMatrix).
func runMatrix(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traceDir := fs.String("trace-dir", "", "folder holding mooncake/conversation_trace.jsonl and azure2023/*.csv")
	workloads := fs.String("workloads", strings.Join(tune.MatrixWorkloadNames(), ","), "workloads: "+strings.Join(tune.MatrixWorkloadNames(), ", "))
	fleets := fs.String("fleets", "4P4D,2P6D,6P2D", "fleet shapes")
	slos := fs.String("slos", "2s/100ms,1s/50ms,500ms/30ms", "objectives TTFT/TPOT")
	duration := fs.Duration("duration", 600*time.Second, "first arrivals of each workload kept (0 = all)")
	model := fs.String("model", sim.DefaultPerfModel, "cost model of the engines: "+strings.Join(sim.PerfModelNames(), ", "))
	seed := fs.Uint64("seed", 1, "seed of the synthetic workloads, tie-breaks and engine hashes")
	parallel := fs.Int("parallel", 2, "simulations at once")
	jsonOut := fs.String("json-out", "", "write the cells as JSON to this file")
	svgOut := fs.String("svg", "", "write the heat map of the ratios to this SVG file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mc := tune.MatrixConfig{Model: *model, Seed: *seed, Parallel: *parallel, Fleets: flaglist.Items(*fleets)}
	var err error
	if mc.SLOs, err = tune.ParseSLOList(*slos); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, name := range flaglist.Items(*workloads) {
		w, err := tune.MatrixWorkloadByName(name, *traceDir, *duration)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		mc.Workloads = append(mc.Workloads, w)
	}
	progress := func(done, total int, name string) {
		if !*quiet {
			fmt.Fprintf(stderr, "matrix: %d/%d %s\n", done, total, name)
		}
	}
	cells, err := tune.RunMatrix(ctx, mc, progress)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := tune.WriteMatrixText(stdout, cells); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *jsonOut != "" {
		if err := writeWith(*jsonOut, func(w io.Writer) error { return tune.WriteMatrixJSON(w, cells) }); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if *svgOut != "" {
		b, err := tune.MatrixHeatmapSVG(cells)
		if err == nil {
			err = os.WriteFile(*svgOut, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	return 0
}

func writeWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
