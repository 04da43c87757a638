package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/condisagg/condisagg/internal/splitmix"
)

const kindAzure uint64 = 64

const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// AzureOptions configure ReadAzure. The zero value gives prompts that share nothing.
type AzureOptions struct {
	Seed uint64 // stream namespace
	// With PrefixGroups > 0, each prompt starts with one of PrefixGroups synthetic shared
	// prefixes (chosen by a hash of Seed and the row) of min(PrefixTokens, ContextTokens−1)
	// tokens, the rest being request-unique: the trace itself has no prefix information.
	PrefixGroups, PrefixTokens int
}

// ReadAzure reads an Azure LLM inference trace 2023 CSV (TIMESTAMP,ContextTokens,
// GeneratedTokens; perf-model.md §7), keeping requests while w admits them. Arrivals are
// relative to the first row; rows must be in time order.
func ReadAzure(r io.Reader, o AzureOptions, w Window) ([]Request, error) {
	if o.PrefixGroups < 0 || o.PrefixTokens < 0 {
		return nil, fmt.Errorf("workload: azure prefix_groups %d, prefix_tokens %d must be >= 0", o.PrefixGroups, o.PrefixTokens)
	}
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
		out = append(out, o.request(len(out), arrival, in, gen))
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

func (o AzureOptions) request(i int, arrival time.Duration, in, gen int) Request {
	req := Request{Index: i, Arrival: arrival, Session: -1, Turn: -1, Parent: -1, InputTokens: in, OutputTokens: gen}
	shared := 0
	if o.PrefixGroups > 0 {
		shared = min(o.PrefixTokens, in-1)
	}
	if shared > 0 {
		g := splitmix.Mix64(o.Seed^uint64(i)) % uint64(o.PrefixGroups)
		req.Prompt = append(req.Prompt, Segment{ID: synthID(o.Seed, kindAzure, g, 2), Len: uint32(shared)})
	}
	req.Prompt = append(req.Prompt, Segment{ID: synthID(o.Seed, kindAzure, uint64(i), 0), Len: uint32(in - shared)})
	if gen > 0 {
		req.Output = []Segment{{ID: synthID(o.Seed, kindAzure, uint64(i), 1), Len: uint32(gen)}}
	}
	return req
}
