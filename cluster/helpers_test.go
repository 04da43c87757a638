package cluster

import (
	"os"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/sim"
	"github.com/condisagg/condisagg/workload"
)

// traceHead reads the first n requests of the test slice of the Mooncake conversation trace.
func traceHead(t testing.TB, n int) []workload.Request {
	t.Helper()
	f, err := os.Open("testdata/mooncake_conversation_head400.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := workload.ReadMooncake(f, workload.MooncakeOptions{}, workload.Window{MaxRequests: n})
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// model returns the default cost model.
func model(t testing.TB) sim.CostModel {
	t.Helper()
	m, err := sim.PerfModel(sim.DefaultPerfModel)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// req builds a request whose prompt is the concatenation of (stream, length) parts, each
// starting at token 0 of its stream.
func req(index int, arrival time.Duration, out int, parts ...[2]int) workload.Request {
	r := workload.Request{Index: index, Arrival: arrival, Session: -1, Turn: -1, Parent: -1, OutputTokens: out}
	for _, p := range parts {
		r.Prompt = append(r.Prompt, workload.Segment{ID: uint64(p[0]), Len: uint32(p[1])})
		r.InputTokens += p[1]
	}
	r.Output = []workload.Segment{{ID: uint64(1_000_000 + index), Len: uint32(out)}}
	return r
}

func islBounding() policy.Disagg {
	d := policy.DefaultDisagg()
	d.Policy = policy.ISLBounding
	return d
}
