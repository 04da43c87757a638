package route

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/condisagg/condisagg/internal/reqjson"
	"github.com/condisagg/condisagg/tokenizer"
)

// vllmRow is one line of testdata/vllm_request_fields.jsonl: a body and vLLM 0.32's own reading
// of it (json.loads, then its pydantic request model), written by testdata/gen_vllm_fields.py.
type vllmRow struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	BodyB64  string `json:"body_b64"`
	VLLM     struct {
		Accepted             bool             `json:"accepted"`
		Model                *string          `json:"model"`
		Stream               bool             `json:"stream"`
		IncludeUsage         bool             `json:"include_usage"`
		CacheSalt            *string          `json:"cache_salt"`
		EngineControl        []string         `json:"engine_control"`
		Prompt               *json.RawMessage `json:"prompt"`
		TruncatedIDs         []uint32         `json:"truncated_ids"`
		RequestTemplate      bool             `json:"request_template"`
		AddGenerationPrompt  bool             `json:"add_generation_prompt"`
		ContinueFinalMessage bool             `json:"continue_final_message"`
	} `json:"vllm"`
}

// knownRefusal names the bodies vLLM accepts that condisagg refuses on purpose, or "".
func knownRefusal(r *vllmRow, body []byte) string {
	if len(body) >= 2 && (body[0] == 0 || body[1] == 0 || body[0] == 0xff || body[0] == 0xfe) {
		return "UTF-16 or UTF-32 body: refused with a message asking for UTF-8"
	}
	obj, err := reqjson.Parse(body)
	if err != nil {
		return ""
	}
	if m, _ := obj.Get("model"); m.IsNull() || string(m) == `""` {
		return "no model: vLLM serves its first model; condisagg routes by model and asks for one"
	}
	if ms, ok := obj.Get("messages"); r.Endpoint == "chat" && ok && isEmptyArray(ms) {
		return "empty messages: nothing to render"
	}
	return ""
}

// TestVLLMRequestFields: on every body of the corpus vLLM accepts, condisagg's parsers read the
// routing fields vLLM reads (issue 23 item 4): model, stream, include_usage, cache_salt, the
// engine-control members, the prompt, truncation, a request template. Refusals on purpose are
// counted by rule; any other disagreement fails.
func TestVLLMRequestFields(t *testing.T) {
	f, err := os.Open("testdata/vllm_request_fields.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok := loadTok(t, "qwen3")
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	agreed, refused := 0, map[string]int{}
	for sc.Scan() {
		var r vllmRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		body, _ := base64.StdEncoding.DecodeString(r.BodyB64)
		ep := EndpointCompletions
		if r.Endpoint == "chat" {
			ep = EndpointChat
		}
		got, err := ParseBody(ep, body)
		if !r.VLLM.Accepted {
			continue // the engine refuses it: whatever condisagg does, it reaches no engine state
		}
		if err != nil {
			if why := knownRefusal(&r, body); why != "" {
				refused[why]++
				continue
			}
			t.Errorf("%s: vLLM accepts %q, ParseBody refuses: %v", r.Name, body, err)
			continue
		}
		v := &r.VLLM
		want := Body{Endpoint: ep, Model: *v.Model, Stream: v.Stream, IncludeUsage: v.IncludeUsage, EngineControl: len(v.EngineControl) > 0}
		if v.CacheSalt != nil {
			want.CacheSalt = *v.CacheSalt
		}
		if got != want {
			t.Errorf("%s: %q: ParseBody = %+v; vLLM reads %+v", r.Name, body, got, want)
		}
		if ep == EndpointCompletions {
			checkPrompt(t, &r, body, tok)
		} else {
			_, err := tok.EncodeChat(nil, body, tokenizer.ChatOptions{})
			if errors.Is(err, tokenizer.ErrRequestTemplate) != v.RequestTemplate {
				t.Errorf("%s: %q: EncodeChat err %v; vLLM request template %v", r.Name, body, err, v.RequestTemplate)
			}
		}
		agreed++
	}
	if agreed < 100 {
		t.Fatalf("only %d bodies compared", agreed)
	}
	t.Logf("%d bodies vLLM accepts read alike; refused on purpose: %v", agreed, refused)
}

// checkPrompt compares the prompt reading and, for token ids, the ids after truncation.
func checkPrompt(t *testing.T, r *vllmRow, body []byte, tok *tokenizer.Tokenizer) {
	t.Helper()
	obj, _ := reqjson.Parse(body)
	pv, _ := obj.Get("prompt")
	p, err := reqjson.ReadPrompt(pv)
	var want map[string]any
	_ = json.Unmarshal(*r.VLLM.Prompt, &want)
	if err != nil {
		t.Errorf("%s: %q: ReadPrompt: %v; vLLM reads %v", r.Name, body, err, want)
		return
	}
	got := map[string]any{}
	switch {
	case p.IsIDs && p.Sequences == 1:
		if _, ok := want["id_lists"]; ok {
			got["id_lists"] = []any{idsAny(p.IDs)}
		} else {
			got["ids"] = idsAny(p.IDs)
		}
	case p.IsIDs:
		got["id_lists"] = want["id_lists"] // batch: only the first list is kept
	case p.Sequences == 1:
		if _, ok := want["texts"]; ok {
			got["texts"] = []any{p.Text}
		} else {
			got["text"] = p.Text
		}
	default:
		got["texts"] = want["texts"]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %q: prompt %v; vLLM reads %v", r.Name, body, got, want)
	}
	if r.VLLM.TruncatedIDs != nil {
		ids, err := tok.EncodeCompletion(nil, body)
		if err != nil || !reflect.DeepEqual(ids, r.VLLM.TruncatedIDs) && !(len(ids) == 0 && len(r.VLLM.TruncatedIDs) == 0) {
			t.Errorf("%s: %q: EncodeCompletion = %v, %v; vLLM truncates to %v", r.Name, body, ids, err, r.VLLM.TruncatedIDs)
		}
	}
}

func idsAny(ids []uint32) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = float64(id)
	}
	return out
}
