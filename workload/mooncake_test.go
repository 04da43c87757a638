package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const headFixture = "testdata/mooncake_conversation_head200.jsonl"

type rawLine struct {
	Timestamp    int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawLines(t testing.TB) []rawLine {
	t.Helper()
	var out []rawLine
	for _, l := range bytes.Split(bytes.TrimSpace(readFixture(t, headFixture)), []byte("\n")) {
		var r rawLine
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func readHead(t testing.TB) []Request {
	t.Helper()
	reqs, err := ReadMooncake(bytes.NewReader(readFixture(t, headFixture)), MooncakeOptions{}, Window{})
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// naiveTokens is perf-model.md §7 step 1–2 written out: 512 tokens per id, truncated.
func naiveTokens(v Vocab, ids []uint64, inputLength int) []uint32 {
	var out []uint32
	for _, h := range ids {
		x := v.Seed ^ (h * 0x9E3779B97F4A7C15)
		for k := uint64(0); k < 512 && len(out) < inputLength; k++ {
			z := x + k + 0x9E3779B97F4A7C15
			z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
			z = (z ^ (z >> 27)) * 0x94D049BB133111EB
			z ^= z >> 31
			out = append(out, v.Lo+uint32(z%uint64(v.Hi-v.Lo)))
		}
	}
	return out
}

func TestMooncakeMatchesTraceAndFormula(t *testing.T) {
	raw := rawLines(t)
	reqs := readHead(t)
	if len(reqs) != len(raw) || len(reqs) != 200 {
		t.Fatalf("read %d requests, fixture has %d lines, want 200", len(reqs), len(raw))
	}
	v := Vocab{Seed: 7, Lo: 1, Hi: 128000}
	var buf []uint32
	for i, r := range reqs {
		w := raw[i]
		if r.Index != i || r.Arrival != time.Duration(w.Timestamp)*time.Millisecond || r.InputTokens != w.InputLength || r.OutputTokens != w.OutputLength {
			t.Fatalf("request %d = %+v, line %+v", i, r, w)
		}
		buf = v.AppendPrompt(buf[:0], &r)
		if len(buf) != w.InputLength {
			t.Fatalf("request %d: %d prompt tokens, input_length %d", i, len(buf), w.InputLength)
		}
		if want := naiveTokens(v, w.HashIDs, w.InputLength); !slicesEqual(buf, want) {
			t.Fatalf("request %d: tokens differ from the perf-model.md formula", i)
		}
		for _, tok := range buf {
			if tok < v.Lo || tok >= v.Hi {
				t.Fatalf("request %d: token %d outside [%d, %d)", i, tok, v.Lo, v.Hi)
			}
		}
		if out := v.AppendOutput(nil, &r); len(out) != w.OutputLength {
			t.Fatalf("request %d: %d output tokens, output_length %d", i, len(out), w.OutputLength)
		}
	}
}

// TestMooncakeConversations: a request's Parent is the latest earlier request with the same
// first two hash ids (a linear scan here), its Session the parent's and its Turn one more; the
// first turn of a conversation opens the next session number.
func TestMooncakeConversations(t *testing.T) {
	raw := rawLines(t)
	reqs := readHead(t)
	sessions, followUps := int64(0), 0
	for i, r := range reqs {
		parent := -1
		for j := i - 1; j >= 0 && len(raw[i].HashIDs) >= 2; j-- {
			if len(raw[j].HashIDs) >= 2 && raw[j].HashIDs[0] == raw[i].HashIDs[0] && raw[j].HashIDs[1] == raw[i].HashIDs[1] {
				parent = j
				break
			}
		}
		switch {
		case len(raw[i].HashIDs) < 2:
			if r.Session != -1 || r.Turn != -1 || r.Parent != -1 {
				t.Fatalf("one-block request %d: %+v", i, r)
			}
		case parent < 0:
			if r.Session != sessions || r.Turn != 0 || r.Parent != -1 {
				t.Fatalf("request %d opens a conversation: session %d turn %d parent %d, want session %d", i, r.Session, r.Turn, r.Parent, sessions)
			}
			sessions++
		default:
			followUps++
			p := reqs[parent]
			if r.Parent != parent || r.Session != p.Session || r.Turn != p.Turn+1 {
				t.Fatalf("request %d: session %d turn %d parent %d, want parent %d (session %d turn %d)", i, r.Session, r.Turn, r.Parent, parent, p.Session, p.Turn+1)
			}
		}
	}
	if followUps == 0 || sessions == 0 {
		t.Fatalf("the fixture has %d sessions and %d follow-ups; it must have both", sessions, followUps)
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sharedIDs(a, b []uint64) int {
	k := 0
	for k < len(a) && k < len(b) && a[k] == b[k] {
		k++
	}
	return k
}

// Shared leading hash ids give identical router blocks at block sizes 16 and 64, and the first
// block after the shared run differs.
func TestMooncakeSharedIDsShareRouterBlocks(t *testing.T) {
	raw := rawLines(t)
	reqs := readHead(t)
	v := DefaultVocab()
	toks := make([][]uint32, len(reqs))
	for i := range reqs {
		toks[i] = v.AppendPrompt(nil, &reqs[i])
	}
	pairs, longShared := 0, 0
	for i := range reqs {
		for j := i + 1; j < len(reqs); j++ {
			k := sharedIDs(raw[i].HashIDs, raw[j].HashIDs)
			if k == 0 {
				continue
			}
			pairs++
			if k > 1 {
				longShared++
			}
			for _, bs := range []int{16, 64} {
				full := min(len(toks[i]), len(toks[j])) / bs
				same := 0
				for same < full && slicesEqual(toks[i][same*bs:(same+1)*bs], toks[j][same*bs:(same+1)*bs]) {
					same++
				}
				want := min(k*TraceBlockTokens/bs, full)
				if same != want {
					t.Fatalf("requests %d,%d share %d ids: %d equal leading %d-token blocks, want %d", i, j, k, same, bs, want)
				}
			}
		}
	}
	if pairs < 1000 || longShared == 0 {
		t.Fatalf("fixture exercised %d sharing pairs (%d sharing >1 id); want >= 1000 and some multi-id", pairs, longShared)
	}
}

func TestMooncakeMalformedLinesNameTheLine(t *testing.T) {
	good := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}` + "\n"
	cases := []struct {
		name, input, want string
	}{
		{"bad_json", good + "{not json}\n", "line 2: decode"},
		{"missing_hash_ids", good + good + `{"timestamp": 9, "input_length": 1, "output_length": 1}` + "\n", `line 3: missing field "hash_ids"`},
		{"missing_timestamp", `{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, `line 1: missing field "timestamp"`},
		{"ids_count_short", `{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [0, 1]}`, "line 1: input_length 1025 does not fit 2 hash_ids"},
		{"ids_count_long", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0, 1]}`, "line 1: hash_ids has 2 ids, input_length 10 needs 1"},
		{"negative_id", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-4]}`, "line 1: hash_ids[0] = -4"},
		{"negative_output", `{"timestamp": 0, "input_length": 10, "output_length": -1, "hash_ids": [4]}`, "line 1: output_length -1"},
		{"zero_input", `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, "line 1: input_length 0"},
		{"unsorted", good + "\n" + `{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": [4]}`, "line 3: timestamp 4 is before the previous line's 5"},
		{"too_long", good + `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1], "pad": "` + strings.Repeat("x", 300) + `"}` + "\n", "line 2: longer than 256 bytes"},
		{"float_length", `{"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": [4]}`, "line 1: decode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(c.input), MooncakeOptions{MaxLineBytes: 256}, Window{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestMooncakeReaderEdges(t *testing.T) {
	in := "\n" + `{"timestamp": 0, "input_length": 513, "output_length": 0, "hash_ids": [3, 9], "extra": [1]}` + "\n\n" +
		`{"timestamp": 1000, "input_length": 1, "output_length": 2, "hash_ids": [3]}` // no final newline
	mr := NewMooncakeReader(strings.NewReader(in), MooncakeOptions{IDOffset: 10})
	r0, err := mr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Segment{{ID: 13, Len: 512}, {ID: 19, Len: 1}}; !segsEqual(r0.Prompt, want) || r0.Output != nil {
		t.Fatalf("request 0 prompt %v output %v, want %v and no output", r0.Prompt, r0.Output, want)
	}
	r1, err := mr.Next()
	if err != nil || r1.Index != 1 || r1.Arrival != time.Second || !segsEqual(r1.Prompt, []Segment{{ID: 13, Len: 1}}) {
		t.Fatalf("request 1 = %+v, %v", r1, err)
	}
	if _, err := mr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last line: %v, want io.EOF", err)
	}
}

func segsEqual(a, b []Segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWindowAndScale(t *testing.T) {
	all := readHead(t)
	cases := []struct {
		name string
		w    Window
		want int
	}{
		{"first_n_requests", Window{MaxRequests: 17}, 17},
		{"first_10s", Window{Duration: 10 * time.Second}, countBefore(all, 10*time.Second)},
		{"both_limits_smaller_wins", Window{MaxRequests: 500, Duration: 10 * time.Second}, countBefore(all, 10*time.Second)},
		{"no_limit", Window{}, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadMooncake(bytes.NewReader(readFixture(t, headFixture)), MooncakeOptions{}, c.w)
			if err != nil || len(got) != c.want || len(c.w.Apply(all)) != c.want {
				t.Fatalf("read %d (apply %d), want %d; err %v", len(got), len(c.w.Apply(all)), c.want, err)
			}
		})
	}
	if n := countBefore(all, 10*time.Second); n == 0 || n == 200 {
		t.Fatalf("fixture has %d requests in the first 10 s; the window case needs a strict subset", n)
	}
	scaled, err := ScaleRate(all, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if scaled[i].Arrival != all[i].Arrival/4 {
			t.Fatalf("request %d: scaled arrival %v, want %v", i, scaled[i].Arrival, all[i].Arrival/4)
		}
	}
	if all[199].Arrival == 0 {
		t.Fatal("fixture's last arrival is 0; scaling is not exercised")
	}
	for _, bad := range []float64{0, -1, nanValue()} {
		if _, err := ScaleRate(all, bad); err == nil {
			t.Fatalf("ScaleRate(%v) accepted", bad)
		}
	}
}

func nanValue() float64 { z := 0.0; return z / z }

func countBefore(reqs []Request, d time.Duration) int {
	n := 0
	for _, r := range reqs {
		if r.Arrival < d {
			n++
		}
	}
	return n
}

func FuzzParseMooncakeLine(f *testing.F) {
	for _, l := range bytes.Split(readFixture(f, headFixture), []byte("\n"))[:20] {
		f.Add(l)
	}
	f.Add([]byte(`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [4611686018427387903]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := ParseMooncakeLine(line)
		if err != nil {
			return
		}
		if want := (rec.InputLength + TraceBlockTokens - 1) / TraceBlockTokens; len(rec.HashIDs) != want || rec.InputLength < 1 {
			t.Fatalf("accepted input_length %d with %d ids", rec.InputLength, len(rec.HashIDs))
		}
		r := rec.request(0, 0)
		if segmentsLen(r.Prompt) != rec.InputLength || segmentsLen(r.Output) != rec.OutputLength {
			t.Fatalf("segments cover %d/%d tokens, want %d/%d", segmentsLen(r.Prompt), segmentsLen(r.Output), rec.InputLength, rec.OutputLength)
		}
		if r.InputTokens > len(line)*TraceBlockTokens {
			t.Fatalf("input_length %d not bounded by the line's %d bytes", r.InputTokens, len(line))
		}
	})
}

// Lines longer than the 64 KiB read buffer but within MaxLineBytes are read whole.
func TestMooncakeLongLine(t *testing.T) {
	ids := make([]string, 20000) // ~130 KB of JSON
	for i := range ids {
		ids[i] = strconv.Itoa(1000000 + i)
	}
	line := `{"timestamp": 3, "input_length": 10240000, "output_length": 1, "hash_ids": [` + strings.Join(ids, ", ") + "]}\n"
	in := line + line
	reqs, err := ReadMooncake(strings.NewReader(in), MooncakeOptions{}, Window{})
	if err != nil || len(reqs) != 2 || reqs[1].InputTokens != 10240000 || len(reqs[1].Prompt) != 20000 {
		t.Fatalf("%d requests, err %v", len(reqs), err)
	}
	if _, err := ReadMooncake(strings.NewReader(in), MooncakeOptions{MaxLineBytes: 100000}, Window{}); err == nil || !strings.Contains(err.Error(), "line 1: longer than 100000 bytes") {
		t.Fatalf("err = %v", err)
	}
}
