package tokenizer

import (
	"encoding/json"
	"testing"
	"time"
)

type chatExpect struct {
	Prompt string   `json:"prompt"`
	IDs    []uint32 `json:"ids"`
	Error  string   `json:"error"`
}

// TestConformanceChats renders every committed chat request and compares the
// prompt and ids with transformers' apply_chat_template + encode.
func TestConformanceChats(t *testing.T) {
	reqs := readJSONL[json.RawMessage](t, "conformance_chats.jsonl.gz")
	if len(reqs) < 300 {
		t.Fatalf("chat corpus has %d conversations, want >= 300", len(reqs))
	}
	now := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC)
	for _, m := range modelNames {
		t.Run(m, func(t *testing.T) {
			tk := loadModel(t, m, Options{})
			want := readJSONL[chatExpect](t, "conformance_"+m+"_chats_hf.jsonl.gz")
			if len(want) != len(reqs) {
				t.Fatalf("%d expectations for %d requests", len(want), len(reqs))
			}
			bad := 0
			for i, body := range reqs {
				prompt, err := tk.RenderChat(body, ChatOptions{Now: now})
				if want[i].Error != "" {
					if err == nil {
						bad++
						t.Errorf("chat %d: rendered, want error %q", i, want[i].Error)
					}
					continue
				}
				if err != nil {
					bad++
					t.Errorf("chat %d: %v", i, err)
					continue
				}
				if prompt != want[i].Prompt {
					bad++
					if bad <= 5 {
						t.Errorf("chat %d prompt differs at byte %d:\n got %q\nwant %q", i, strDiff(prompt, want[i].Prompt), clip(prompt[strDiff(prompt, want[i].Prompt):], 120), clip(want[i].Prompt[strDiff(prompt, want[i].Prompt):], 120))
					}
					continue
				}
				ids, err := tk.EncodeChat(nil, body, ChatOptions{Now: now})
				if err != nil || !equalIDs(ids, want[i].IDs) {
					bad++
					t.Errorf("chat %d ids differ (err %v)", i, err)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d chats differ", bad, len(reqs))
			}
		})
	}
}

func strDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
