package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/workload"
)

// The binary's run: flags -> Mooncake slice -> live server -> JSON report.
func TestRunMooncakeSliceJSON(t *testing.T) {
	s := &tokenServer{ttft: constant(5 * time.Millisecond), tpot: constant(time.Millisecond),
		decision: func(int) string { return "route=decode;reason=bypass_isl" }}
	srv := s.start(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"--url", srv.URL + "/v1/completions", "--trace", "testdata/mooncake_conversation_head5.jsonl",
		"--max-requests", "4", "--time-scale", "0.001", "--slo", "ttft=1s,tpot=50ms", "-o", "json"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	var rep struct {
		Summary struct {
			Requests, Completed int
			Attainment          float64
			Routes              map[string]int
			TTFT                struct{ P50 float64 }
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if rep.Summary.Requests != 4 || rep.Summary.Completed != 4 || rep.Summary.Routes["decode"] != 4 || rep.Summary.TTFT.P50 < 5 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	// Trace lines 1-4: input_length 6758, 7322, 7236, 2290 with outputs 500, 490, 794, 316.
	for out, in := range map[int]int{500: 6758, 490: 7322, 794: 7236, 316: 2290} {
		if s.prompts[out] != in {
			t.Errorf("request with %d output tokens had a %d-token prompt, want %d", out, s.prompts[out], in)
		}
	}
}

func TestRunTable(t *testing.T) {
	s := &tokenServer{ttft: constant(time.Millisecond), tpot: constant(time.Millisecond)}
	srv := s.start(t)
	var out bytes.Buffer
	err := run(t.Context(), []string{"--url", srv.URL + "/v1/completions", "--trace", "testdata/mooncake_conversation_head5.jsonl",
		"--max-requests", "2", "--name", "live"}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode", "ttft p50", "\nlive ", "(no decision header)", "slo ttft=2s,tpot=100ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no_source", nil, "0 given, want exactly one"},
		{"two_sources", []string{"--trace", "a", "--synthetic", "b"}, "2 given"},
		{"bad_slo", []string{"--trace", "a", "--slo", "ttft=fast"}, "--slo"},
		{"bad_concurrency", []string{"--trace", "a", "--concurrency", "0"}, "--concurrency: 0"},
		{"bad_vocab", []string{"--trace", "a", "--vocab", "9,3"}, "--vocab"},
		{"bad_output", []string{"--trace", "a", "-o", "yaml"}, `-o: "yaml"`},
		{"bad_scale", []string{"--trace", "a", "--time-scale", "0"}, "--time-scale"},
		{"bad_input_scale", []string{"--trace", "a", "--input-scale", "2"}, "--input-scale: 2 must be in (0, 1]"},
		{"bad_output_scale", []string{"--trace", "a", "--output-scale", "0"}, "--output-scale: 0 must be in (0, 1]"},
		{"unknown_synthetic", []string{"--synthetic", "nope"}, `"nope"`},
		{"missing_file", []string{"--trace", "testdata/none.jsonl"}, "none.jsonl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), c.args, &out, &out)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestParseDecision(t *testing.T) {
	cases := []struct{ in, route, reason string }{
		{"route=decode;reason=bypass_isl;isl=10;eff_isl=2;overlap_blocks=1", "decode", "bypass_isl"},
		{"reason=remote_isl_too_long; route=prefill", "prefill", "remote_isl_too_long"},
		{"", "", ""},
		{"garbage", "", ""},
	}
	for _, c := range cases {
		if r, why := parseDecision(c.in); r != c.route || why != c.reason {
			t.Errorf("parseDecision(%q) = %q, %q; want %q, %q", c.in, r, why, c.route, c.reason)
		}
	}
}

func TestReadStream(t *testing.T) {
	clock := time.Duration(0)
	tick := func() time.Duration { clock += 10 * time.Millisecond; return clock }
	body := ": comment\n\nevent: x\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n" +
		"data: {\"choices\":[{\"text\":\"\"}]}\n\n" + // no text: not a token chunk
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":7}}}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"text\":\"late\"}]}\n\n"
	st, err := readStream(strings.NewReader(body), tick, 10)
	if err != nil || st.chunks != 2 || st.tokens() != 5 || !st.done || len(st.gaps) != 1 || st.first >= st.last || st.cached != 7 {
		t.Fatalf("stats %+v err %v", st, err)
	}
	if _, err := readStream(strings.NewReader("data: {bad\n\n"), tick, 10); err == nil || !strings.Contains(err.Error(), "chunk 1") {
		t.Fatalf("bad chunk: %v", err)
	}
	long := "data: " + strings.Repeat("x", maxSSELineBytes+10) + "\n"
	if _, err := readStream(strings.NewReader(long), tick, 10); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("long line: %v", err)
	}
}

func TestReadStreamFixture(t *testing.T) {
	body, err := os.ReadFile("testdata/completions_stream_handwritten.sse")
	if err != nil {
		t.Fatal(err)
	}
	var clock time.Duration
	st, err := readStream(bytes.NewReader(body), func() time.Duration { clock += time.Millisecond; return clock }, 10)
	if err != nil || st.chunks != 2 || st.tokens() != 2 || st.cached != 0 || !st.done || st.first != time.Millisecond || st.last != 3*time.Millisecond { // the clock ticks once per line
		t.Fatalf("stats %+v err %v", st, err)
	}
}

func FuzzReadStream(f *testing.F) {
	body, err := os.ReadFile("testdata/completions_stream_handwritten.sse")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	f.Add([]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n"))
	f.Add([]byte(": x\r\ndata:\r\n\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var clock time.Duration
		st, _ := readStream(bytes.NewReader(body), func() time.Duration { clock++; return clock }, 4)
		if len(st.gaps) > 4 || st.chunks > len(body) || st.first > st.last {
			t.Fatalf("stats %+v from %d bytes", st, len(body))
		}
	})
}

// A slice of a synthetic multi-turn workload replays closed loop to completion.
func TestRunSyntheticClosedLoop(t *testing.T) {
	s := &tokenServer{ttft: constant(time.Millisecond), tpot: constant(0)}
	srv := s.start(t)
	var out bytes.Buffer
	err := run(t.Context(), []string{"--url", srv.URL + "/v1/completions", "--synthetic", "agentic-code", "--seed", "3",
		"--max-requests", "12", "--closed-loop", "--time-scale", "0.001", "-o", "json"}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Summary struct{ Requests, Completed int }
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Summary.Completed != 12 {
		t.Fatalf("report %+v, %v:\n%s", rep, err, out.String())
	}
	reqs, _ := workload.Synthetic("agentic-code", 3)
	later := 0
	for _, r := range reqs[:12] {
		if r.Parent >= 0 {
			later++
		}
	}
	if later == 0 {
		t.Fatal("the slice has no later turns; closed loop is not exercised")
	}
}
