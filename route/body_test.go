package route

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
		// Percent-encoded paths route as the engine decodes them.
		"/v1/chat/%63ompletions": EndpointChat, "/v1/%63ompletions?x": EndpointCompletions,
		"/v1%2Fchat%2Fcompletions": EndpointChat, "/%76%31/completions/": EndpointCompletions,
		"/v1/chat/completions%": EndpointOther, "/v1/chat/%zzcompletions": EndpointOther,
	}
	for path, want := range cases {
		if got := ParseEndpoint(path); got != want {
			t.Errorf("ParseEndpoint(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestParseBody: envoy-extproc.md §4 — 400 invalid_body names what is wrong.
func TestParseBody(t *testing.T) {
	cases := []struct {
		name, body string
		ep         Endpoint
		wantErr    string // substring; "" = accepted
		want       Body
	}{
		{"chat ok", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
			EndpointChat, "", Body{Endpoint: EndpointChat, Model: "m", Stream: true, IncludeUsage: true}},
		{"completion string", `{"model":"m","prompt":"hi"}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"completion token ids", `{"model":"m","prompt":[1,2,3]}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"not json", `{"model":`, EndpointChat, "not a valid JSON object", Body{}},
		{"array body", `[1]`, EndpointChat, "not a valid JSON object", Body{}},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, EndpointChat, `"model"`, Body{}},
		{"model not a string", `{"model":3,"messages":[]}`, EndpointChat, `"model" must be a string, not an integer`, Body{}},
		{"no messages", `{"model":"m"}`, EndpointChat, `missing required field "messages"`, Body{}},
		{"null messages", `{"model":"m","messages":null}`, EndpointChat, `missing required field "messages"`, Body{}},
		{"empty messages", `{"model":"m","messages":[ ]}`, EndpointChat, `"messages" must be a non-empty array`, Body{}},
		{"messages object", `{"model":"m","messages":{}}`, EndpointChat, `"messages" must be a non-empty array`, Body{}},
		{"no prompt", `{"model":"m"}`, EndpointCompletions, `missing required field "prompt"`, Body{}},
		{"stream not bool", `{"model":"m","prompt":"x","stream":"maybe"}`, EndpointCompletions, `"stream" must be a boolean`, Body{}},
		// issue 23 item 4: the engine's reading (json.loads + pydantic lax mode), key by key.
		{"model key case variant is another key", `{"MODEL":"other","model":"m","prompt":"x"}`, EndpointCompletions, "",
			Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"model key case variant alone", `{"Model":"m","prompt":"x"}`, EndpointCompletions, `missing required field "model"`, Body{}},
		{"prompt key case variant alone", `{"model":"m","PROMPT":"x"}`, EndpointCompletions, `missing required field "prompt"`, Body{}},
		{"bom", "\xef\xbb\xbf{\"model\":\"m\",\"prompt\":\"x\"}", EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"nan", `{"model":"m","prompt":"x","temperature":NaN}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"string stream", `{"model":"m","prompt":"x","stream":"true","stream_options":{"include_usage":"yes"}}`, EndpointCompletions, "",
			Body{Endpoint: EndpointCompletions, Model: "m", Stream: true, IncludeUsage: true}},
		{"int stream", `{"model":"m","prompt":"x","stream":1}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m", Stream: true}},
		{"duplicate model, last wins", `{"model":"a","model":"m","prompt":"x"}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"escaped duplicate model, last wins", `{"model":"a","mod\u0065l":"m","prompt":"x"}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m"}},
		{"engine control", `{"model":"m","prompt":"x","vllm_xargs":{}}`, EndpointCompletions, "", Body{Endpoint: EndpointCompletions, Model: "m", EngineControl: true}},
		{"utf-16", "{\x00\"\x00", EndpointCompletions, "UTF-16", Body{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseBody(c.ep, []byte(c.body))
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

// FuzzParseBody: no panic, and every refusal is an ErrInvalidBody.
func FuzzParseBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2]}`))
	f.Add([]byte(`{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletions} {
			if _, err := ParseBody(ep, body); err != nil && !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("%v: error %v is not ErrInvalidBody", ep, err)
			}
		}
	})
}

// FuzzScanBody: whenever the fast scanner accepts a body that encoding/json also accepts,
// both read the same routing fields (the scanner never invents a field).
func FuzzScanBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"h\"i]}"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2], "stream" : false }`))
	f.Add([]byte(`{"model":"m\u0041","messages":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletions} {
			fast, ok := scanBody(ep, body)
			slow, err := decodeBody(ep, body)
			if ok && err == nil && fast != slow {
				t.Fatalf("%v: scan %+v, decode %+v", ep, fast, slow)
			}
		}
	})
}

// TestScanBodyAgrees: the fast path accepts the common shapes and matches decodeBody.
func TestScanBodyAgrees(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a \"quoted\" ] } text\\"}],"stream":true}`,
		` { "stream" : false , "model" : "qwen3", "prompt" : "x" } `,
		`{"model":"m","prompt":[1,2,3],"max_tokens":5,"temperature":0.5,"stop":null}`,
	} {
		ep := EndpointChat
		if strings.Contains(body, "prompt") {
			ep = EndpointCompletions
		}
		fast, ok := scanBody(ep, []byte(body))
		slow, err := decodeBody(ep, []byte(body))
		if !ok || err != nil || fast != slow {
			t.Fatalf("%s: scan %+v %v, decode %+v %v", body, fast, ok, slow, err)
		}
	}
}
