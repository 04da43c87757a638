package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

func TestCompletionBody(t *testing.T) {
	reqs := readHead(t)
	v := Vocab{Seed: 3, Lo: 100, Hi: 200}
	for _, stream := range []bool{false, true} {
		r := &reqs[3]
		body := AppendCompletionBody(nil, v, r, BodyOptions{Model: `m"1`, Stream: stream})
		var got struct {
			Model         string   `json:"model"`
			Prompt        []uint32 `json:"prompt"`
			MaxTokens     int      `json:"max_tokens"`
			MinTokens     int      `json:"min_tokens"`
			IgnoreEOS     bool     `json:"ignore_eos"`
			Stream        bool     `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("body is not JSON: %v", err)
		}
		if got.Model != `m"1` || !slicesEqual(got.Prompt, v.AppendPrompt(nil, r)) || got.MaxTokens != r.OutputTokens || got.MinTokens != r.OutputTokens || !got.IgnoreEOS {
			t.Fatalf("body fields %+v (prompt %d tokens, want %d)", got, len(got.Prompt), r.InputTokens)
		}
		if got.Stream != stream || (got.StreamOptions != nil) != stream || (stream && !got.StreamOptions.IncludeUsage) {
			t.Fatalf("stream=%v: body stream %v options %v", stream, got.Stream, got.StreamOptions)
		}
	}
	zero := Request{Prompt: []Segment{{ID: 1, Len: 1}}}
	if b := AppendCompletionBody(nil, v, &zero, BodyOptions{}); !bytes.Contains(b, []byte(`"max_tokens":1,`)) {
		t.Fatalf("zero output length must ask for 1 token: %s", b)
	}
}

func TestReadAzure(t *testing.T) {
	f, err := os.Open("testdata/azure2023_conv_head100.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadAzure(f, AzureOptions{Seed: 1}, Window{})
	if err != nil {
		t.Fatal(err)
	}
	// Rows 1 and 2: 18:15:46.6805900,374,44 and 18:15:50.9951690,396,109.
	if len(reqs) != 100 || reqs[0].Arrival != 0 || reqs[1].Arrival != 4314579*time.Microsecond || reqs[1].InputTokens != 396 || reqs[1].OutputTokens != 109 {
		t.Fatalf("%d requests; second %+v", len(reqs), reqs[1])
	}
	checkWellFormed(t, reqs)
	a, b := DefaultVocab().AppendPrompt(nil, &reqs[0]), DefaultVocab().AppendPrompt(nil, &reqs[1])
	if slicesEqual(a[:16], b[:16]) {
		t.Fatal("azure prompts must not share tokens")
	}
	// With synthetic prefixes: 3 groups of 200 tokens; prompts of a group share exactly them.
	withPrefix, err := ReadAzure(bytes.NewReader(readFixture(t, "testdata/azure2023_conv_head100.csv")), AzureOptions{Seed: 1, PrefixGroups: 3, PrefixTokens: 200}, Window{MaxRequests: 40})
	if err != nil || len(withPrefix) != 40 {
		t.Fatalf("%d requests, %v", len(withPrefix), err)
	}
	checkWellFormed(t, withPrefix)
	groups := map[uint64][]uint32{}
	for i := range withPrefix {
		r := &withPrefix[i]
		if r.InputTokens <= 200 {
			continue
		}
		toks := DefaultVocab().AppendPrompt(nil, r)
		if ref, ok := groups[r.Prompt[0].ID]; ok && (!slicesEqual(ref[:200], toks[:200]) || ref[200] == toks[200] && ref[201] == toks[201]) {
			t.Fatalf("request %d: shares the wrong amount with its group", i)
		}
		groups[r.Prompt[0].ID] = toks
	}
	if len(groups) != 3 {
		t.Fatalf("%d prefix groups used, want 3", len(groups))
	}
	for _, c := range []struct{ in, want string }{
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:46.6,1,1\n", "line 3: timestamp"},
		{"2023-11-16 18:15:46.68,0,1\n", "line 1: ContextTokens"},
		{"2023-11-16,1,1\n", "line 1: TIMESTAMP"},
		{"1,2\n", "line 1: 2 fields"},
	} {
		if _, err := ReadAzure(bytes.NewReader([]byte(c.in)), AzureOptions{}, Window{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("ReadAzure(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}
