package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

const kindAzure uint64 = 64

const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ReadAzure reads an Azure LLM inference trace 2023 CSV (TIMESTAMP,ContextTokens,
// GeneratedTokens; perf-model.md §7), keeping requests while w admits them. The trace has no
// prefix information: every prompt is one request-unique stream (namespace seed), so requests
// share no tokens. Arrivals are relative to the first row; rows must be in time order.
func ReadAzure(r io.Reader, seed uint64, w Window) ([]Request, error) {
	lr := newLineReader(r, DefaultMaxLineBytes)
	var out []Request
	var first time.Time
	for {
		line, err := lr.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("workload: azure %w", err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || (lr.line == 1 && bytes.HasPrefix(line, []byte("TIMESTAMP"))) {
			continue
		}
		ts, in, gen, err := parseAzureLine(line)
		if err != nil {
			return out, fmt.Errorf("workload: azure line %d: %w", lr.line, err)
		}
		if len(out) == 0 {
			first = ts
		}
		arrival := ts.Sub(first)
		if len(out) > 0 && arrival < out[len(out)-1].Arrival {
			return out, fmt.Errorf("workload: azure line %d: timestamp %s is before the previous row", lr.line, ts.Format(azureTimeLayout))
		}
		if !w.admits(len(out), arrival) {
			return out, nil
		}
		i := len(out)
		req := Request{Index: i, Arrival: arrival, Session: -1, Turn: -1, Parent: -1, InputTokens: in, OutputTokens: gen,
			Prompt: []Segment{{ID: synthID(seed, kindAzure, uint64(i), 0), Len: uint32(in)}}}
		if gen > 0 {
			req.Output = []Segment{{ID: synthID(seed, kindAzure, uint64(i), 1), Len: uint32(gen)}}
		}
		out = append(out, req)
	}
}

func parseAzureLine(line []byte) (time.Time, int, int, error) {
	f := bytes.Split(line, []byte(","))
	if len(f) != 3 {
		return time.Time{}, 0, 0, fmt.Errorf("%d fields, want 3 (TIMESTAMP,ContextTokens,GeneratedTokens)", len(f))
	}
	ts, err := time.Parse(azureTimeLayout, string(bytes.TrimSpace(f[0])))
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("TIMESTAMP %q: %w", f[0], err)
	}
	in, err := strconv.Atoi(string(bytes.TrimSpace(f[1])))
	if err != nil || in < 1 || in > maxOutputTokens {
		return time.Time{}, 0, 0, fmt.Errorf("ContextTokens %q must be an integer in [1, %d]", f[1], maxOutputTokens)
	}
	gen, err := strconv.Atoi(string(bytes.TrimSpace(f[2])))
	if err != nil || gen < 0 || gen > maxOutputTokens {
		return time.Time{}, 0, 0, fmt.Errorf("GeneratedTokens %q must be an integer in [0, %d]", f[2], maxOutputTokens)
	}
	return ts, in, gen, nil
}
