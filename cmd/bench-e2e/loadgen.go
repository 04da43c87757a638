package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// msDist is a workload.Dist[time.Duration] as loadgen's -o json writes it (milliseconds).
type msDist struct {
	N                                                 int
	Mean, Min, P10, P25, P50, P75, P90, P95, P99, Max float64
}

func (m msDist) duration() workload.Dist[time.Duration] {
	d := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return workload.Dist[time.Duration]{N: m.N, Mean: d(m.Mean), Min: d(m.Min), P10: d(m.P10), P25: d(m.P25),
		P50: d(m.P50), P75: d(m.P75), P90: d(m.P90), P95: d(m.P95), P99: d(m.P99), Max: d(m.Max)}
}

// loadgenReport is the part of loadgen's -o json document the comparison reads.
type loadgenReport struct {
	Summary struct {
		Requests, Completed, Failed int
		TTFT, TPOT, E2E, Gap        msDist
		Routes, Reasons             map[string]int
	}
	SendLag msDist
	Errors  []string
}

// maxReportBytes bounds the loadgen output the tool accepts.
const maxReportBytes = 4 << 20

// parseLoadgen decodes loadgen's -o json output into a summary in wall-clock time.
func parseLoadgen(out []byte) (workload.Summary, loadgenReport, error) {
	var rep loadgenReport
	if len(out) > maxReportBytes {
		return workload.Summary{}, rep, fmt.Errorf("bench-e2e: loadgen output of %d bytes exceeds %d", len(out), maxReportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&rep); err != nil {
		return workload.Summary{}, rep, fmt.Errorf("bench-e2e: decode loadgen -o json (%d bytes): %w", len(out), err)
	}
	s := rep.Summary
	return workload.Summary{Name: "live", Requests: s.Requests, Completed: s.Completed, Failed: s.Failed,
		TTFT: s.TTFT.duration(), TPOT: s.TPOT.duration(), E2E: s.E2E.duration(), Gap: s.Gap.duration(),
		Routes: s.Routes, Reasons: s.Reasons}, rep, nil
}

// toSimulatedSummary converts the latency distributions of a wall-clock summary into
// simulated time.
func toSimulatedSummary(s workload.Summary, timeScale float64) workload.Summary {
	s.TTFT = scaleDist(s.TTFT, timeScale)
	s.TPOT = scaleDist(s.TPOT, timeScale)
	s.E2E = scaleDist(s.E2E, timeScale)
	s.Gap = scaleDist(s.Gap, timeScale)
	return s
}

// loadgenArgs are the loadgen flags that replay the slice of o against url with arrivals
// compressed by timeScale.
func loadgenArgs(o *options, url string, timeScale float64) []string {
	args := []string{"--url", url, "--model", "qwen3", "-o", "json", "--name", "live",
		"--max-requests", strconv.Itoa(o.requests),
		"--time-scale", strconv.FormatFloat(1/timeScale, 'g', -1, 64),
		"--concurrency", strconv.Itoa(o.concurrency), "--request-timeout", o.timeout.String()}
	if o.trace != "" {
		return append(args, "--trace", o.trace)
	}
	return append(args, "--synthetic", o.synthetic, "--seed", strconv.FormatUint(o.seed, 10))
}
