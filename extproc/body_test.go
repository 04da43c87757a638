package extproc

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	cases := map[string]Endpoint{
		"/v1/chat/completions": EndpointChat, "/v1/chat/completions?x=1": EndpointChat,
		"/v1/completions": EndpointCompletions, "/v1/completions/": EndpointCompletions,
		"/v1/models": EndpointOther, "/v1/chat/completionsX": EndpointOther, "": EndpointOther,
	}
	for path, want := range cases {
		if got := ParseEndpoint(path); got != want {
			t.Errorf("ParseEndpoint(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestParseRequest: envoy-extproc.md §4 — 400 invalid_body names what is wrong.
func TestParseRequest(t *testing.T) {
	cases := []struct {
		name, body string
		ep         Endpoint
		wantErr    string // substring; "" = accepted
		want       Request
	}{
		{"chat ok", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
			EndpointChat, "", Request{Endpoint: EndpointChat, Model: "m", Stream: true, IncludeUsage: true}},
		{"completion string", `{"model":"m","prompt":"hi"}`, EndpointCompletions, "", Request{Endpoint: EndpointCompletions, Model: "m"}},
		{"completion token ids", `{"model":"m","prompt":[1,2,3]}`, EndpointCompletions, "", Request{Endpoint: EndpointCompletions, Model: "m"}},
		{"not json", `{"model":`, EndpointChat, "not a valid JSON object", Request{}},
		{"array body", `[1]`, EndpointChat, "not a valid JSON object", Request{}},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, EndpointChat, `"model"`, Request{}},
		{"model not a string", `{"model":3,"messages":[]}`, EndpointChat, `"model" must not be a JSON number`, Request{}},
		{"no messages", `{"model":"m"}`, EndpointChat, `missing required field "messages"`, Request{}},
		{"null messages", `{"model":"m","messages":null}`, EndpointChat, `missing required field "messages"`, Request{}},
		{"empty messages", `{"model":"m","messages":[ ]}`, EndpointChat, `"messages" must be a non-empty array`, Request{}},
		{"messages object", `{"model":"m","messages":{}}`, EndpointChat, `"messages" must be a non-empty array`, Request{}},
		{"no prompt", `{"model":"m"}`, EndpointCompletions, `missing required field "prompt"`, Request{}},
		{"stream not bool", `{"model":"m","prompt":"x","stream":"yes"}`, EndpointCompletions, `"stream" must not be a JSON string`, Request{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseRequest(c.ep, []byte(c.body))
			if c.wantErr == "" {
				if err != nil || got != c.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			if !errors.Is(err, ErrInvalidBody) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want ErrInvalidBody containing %q", err, c.wantErr)
			}
		})
	}
}

// FuzzParseRequest: no panic, and every refusal is an ErrInvalidBody.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2]}`))
	f.Add(readFixture(f, "vllm_chat_response.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletions} {
			if _, err := ParseRequest(ep, body); err != nil && !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("%v: error %v is not ErrInvalidBody", ep, err)
			}
		}
	})
}

// FuzzScanRequest: whenever the fast scanner accepts a body that encoding/json also accepts,
// both read the same routing fields (the scanner never invents a field).
func FuzzScanRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"h\"i]}"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2], "stream" : false }`))
	f.Add([]byte(`{"model":"m\u0041","messages":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletions} {
			fast, ok := scanRequest(ep, body)
			slow, err := decodeRequest(ep, body)
			if ok && err == nil && fast != slow {
				t.Fatalf("%v: scan %+v, decode %+v", ep, fast, slow)
			}
		}
	})
}

// TestScanRequestAgrees: the fast path accepts the common shapes and matches decodeRequest.
func TestScanRequestAgrees(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a \"quoted\" ] } text\\"}],"stream":true}`,
		` { "stream" : false , "model" : "qwen3", "prompt" : "x" } `,
		`{"model":"m","prompt":[1,2,3],"max_tokens":5,"temperature":0.5,"stop":null}`,
	} {
		ep := EndpointChat
		if strings.Contains(body, "prompt") {
			ep = EndpointCompletions
		}
		fast, ok := scanRequest(ep, []byte(body))
		slow, err := decodeRequest(ep, []byte(body))
		if !ok || err != nil || fast != slow {
			t.Fatalf("%s: scan %+v %v, decode %+v %v", body, fast, ok, slow, err)
		}
	}
}
