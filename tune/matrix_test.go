package tune

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// TestMatrixSmall: a 1-workload, 1-fleet, 2-SLO matrix on a small synthetic workload: one
// cell per SLO, the best baseline is the largest of the four, the ratio is the slo policy's
// goodput over it, tighter objectives never raise a baseline's goodput (the same runs are
// re-scored), and the table and heat map render.
func TestMatrixSmall(t *testing.T) {
	w, err := MatrixWorkloadByName("b2b", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Load.Requests = 150
	slos, err := ParseSLOList("2s/100ms, 300ms/20ms")
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	cells, err := RunMatrix(context.Background(), MatrixConfig{Workloads: []MatrixWorkload{w}, Fleets: []string{"1P2D"},
		SLOs: slos, Model: "llama3.1-8b-h100", Seed: 1, Parallel: 2}, func(done, total int, _ string) { seen = done })
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 2 || seen != 3+len(staticGrid())+2 {
		t.Fatalf("%d cells after %d simulations", len(cells), seen)
	}
	for _, c := range cells {
		best := max(c.Aggregated, c.AggregatedDecode, c.Disaggregated, c.StaticBest)
		if c.Best != best || (best > 0 && c.Ratio != c.SLOPolicy/best) || c.StaticBestName == "" {
			t.Fatalf("cell %+v", c)
		}
	}
	loose, tight := cells[0], cells[1]
	if tight.Aggregated > loose.Aggregated || tight.Disaggregated > loose.Disaggregated || tight.StaticBest > loose.StaticBest {
		t.Fatalf("a tighter objective raised a baseline: %+v vs %+v", tight, loose)
	}
	var out bytes.Buffer
	if err := WriteMatrixText(&out, cells); err != nil || !strings.Contains(out.String(), "ttft=300ms,tpot=20ms") {
		t.Fatalf("table %v:\n%s", err, out.String())
	}
	svg, err := MatrixHeatmapSVG(cells)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("b2b")) {
		t.Fatalf("heat map %v", err)
	}
	for _, bad := range []string{"2s", "2s/0ms", "x/y", "", " , "} {
		if _, err := ParseSLOList(bad); err == nil || !strings.HasPrefix(err.Error(), "--slos: ") {
			t.Errorf("--slos %q: %v, want an error naming --slos", bad, err)
		}
	}
	if _, err := ParseSLOList("2s/100ms,x,1s/0s"); err == nil || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), `"1s/0s"`) {
		t.Errorf("every bad objective named: %v", err)
	}
	if _, err := MatrixWorkloadByName("conversation", "", time.Minute); err == nil {
		t.Error("a trace workload without --trace-dir accepted")
	}
}

// TestMatrixJobsSLOKnobs: the matrix's slo runs take MatrixConfig's slo_margin and slo_feedback;
// the baselines are untouched, and the defaults are the policy's.
func TestMatrixJobsSLOKnobs(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Cluster = "llm-d-b2b", "1P2D"
	p, err := c.resolve()
	if err != nil {
		t.Fatal(err)
	}
	slos, err := ParseSLOList("2s/100ms,1s/50ms")
	if err != nil {
		t.Fatal(err)
	}
	margin := 0.05
	for _, tc := range []struct {
		mc         MatrixConfig
		wantMargin float64
		wantFB     bool
	}{
		{MatrixConfig{SLOs: slos}, policy.DefaultSLOMargin, false},
		{MatrixConfig{SLOs: slos, SLOMargin: &margin, SLOFeedback: true}, 0.05, true},
	} {
		slo := 0
		for _, j := range matrixJobs(p, tc.mc) {
			if j.cfg.Disagg.Policy != policy.SLOKind {
				continue
			}
			slo++
			if d := j.cfg.Disagg; d.SLOMargin != tc.wantMargin || d.SLOFeedback != tc.wantFB {
				t.Errorf("%s: slo_margin %v slo_feedback %v; want %v %v", j.name, d.SLOMargin, d.SLOFeedback, tc.wantMargin, tc.wantFB)
			}
			if err := j.cfg.Validate(); err != nil {
				t.Errorf("%s: %v", j.name, err)
			}
		}
		if slo != len(slos) {
			t.Fatalf("%d slo jobs; want %d", slo, len(slos))
		}
	}
}
