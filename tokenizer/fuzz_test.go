package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"
)

// decodeForTest turns byte-level ids back into text (added tokens by content).
func decodeForTest(t *testing.T, tk *Tokenizer, table [][]byte, ids []uint32) string {
	t.Helper()
	added := map[uint32]string{}
	for content, id := range tk.special {
		added[id] = content
	}
	var sb strings.Builder
	for _, id := range ids {
		if s, ok := added[id]; ok {
			sb.WriteString(s)
			continue
		}
		if int(id) >= len(table) || table[id] == nil {
			t.Fatalf("id %d is in neither the vocabulary nor the added tokens", id)
		}
		sb.Write(table[id])
	}
	return sb.String()
}

func seedTexts(f *testing.F) {
	texts := readJSONL[string](f, "conformance_texts.jsonl.gz")
	for i := 0; i < len(texts); i += 97 {
		f.Add(texts[i])
	}
}

// FuzzEncodeRoundTrip: Encode never panics on any input, emits at most three
// ids per input byte, and decoding the ids gives back the (sanitised,
// normalised) text for both byte-level models.
func FuzzEncodeRoundTrip(f *testing.F) {
	seedTexts(f)
	type model struct {
		tk    *Tokenizer
		table [][]byte
		nfc   bool
	}
	var ms []model
	for _, name := range modelNames {
		tk := loadModel(f, name, Options{})
		ms = append(ms, model{tk, tk.model.idBytes(), name == "qwen3"})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range ms {
			ids := m.tk.Encode(nil, s, WithoutSpecialTokens)
			if len(ids) > 3*len(s) {
				t.Fatalf("%d ids for %d bytes", len(ids), len(s))
			}
			want := strings.ToValidUTF8(s, "\uFFFD")
			got := decodeForTest(t, m.tk, m.table, ids)
			if m.nfc {
				// NFC applies between added tokens, so compare piecewise-normalised text.
				want, got = norm.NFC.String(want), norm.NFC.String(got)
			}
			if got != want {
				t.Fatalf("round trip of %q gave %q", want, got)
			}
		}
	})
}

// FuzzLoadTokenizerJSON: the tokenizer.json loader never panics, and whatever it
// accepts encodes without panicking.
func FuzzLoadTokenizerJSON(f *testing.F) {
	for _, name := range []string{"bytelevel", "sentencepiece"} {
		data, err := os.ReadFile(filepath.Join("testdata", "synthetic_"+name+"_tokenizer.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"added_tokens":[{"id":3,"content":"<x>"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := New(data, nil, "", Options{CacheSegments: 4})
		if err != nil {
			return
		}
		for _, s := range []string{"ab ab", "<x>a<x>", "héllo 123\n\n", ""} {
			tk.Encode(nil, s, WithSpecialTokens)
		}
	})
}

// FuzzEncodeChat: any request body either renders or returns an error, never a panic.
func FuzzEncodeChat(f *testing.F) {
	reqs := readJSONL[json.RawMessage](f, "conformance_chats.jsonl.gz")
	for i := 0; i < len(reqs); i += 23 {
		f.Add([]byte(reqs[i]))
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"function":{"name":"f"}}]}`))
	tk := loadModel(f, "qwen3", Options{})
	now := time.Date(2026, 7, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := tk.EncodeChat(nil, body, ChatOptions{Now: now})
		if err == nil && len(ids) == 0 && len(body) > 0 {
			// Qwen3's template always emits at least the generation prompt or a message.
			var probe struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if json.Unmarshal(body, &probe) == nil && len(probe.Messages) > 0 {
				t.Fatalf("rendered no tokens for %q", body)
			}
		}
	})
}

// FuzzEncodeCompletion: any completion body either encodes or errors.
func FuzzEncodeCompletion(f *testing.F) {
	for _, s := range []string{`{"prompt":"Hello"}`, `{"prompt":[1,2]}`, `{"prompt":["a"]}`, `{"prompt":[[1]],"add_special_tokens":false}`} {
		f.Add([]byte(s))
	}
	tk := loadModel(f, "llama3", Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := tk.EncodeCompletion(nil, body)
		if err == nil && len(ids) == 0 {
			t.Fatalf("no ids and no error for %q", body)
		}
	})
}
