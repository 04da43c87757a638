package envoy

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFailOpenGuardStripsKVTransferParams: with condisagg unreachable and fail-open, the real
// Envoy sends requests through decode_fallback, and its Lua guard cuts every top-level
// engine-control member (kv_transfer_params, ec_transfer_params, vllm_xargs; any spelling JSON
// allows, duplicates too, after a BOM) while keeping every other member; a body that is not one
// JSON object is refused with vLLM's 400 and reaches no worker.
func TestFailOpenGuardStripsKVTransferParams(t *testing.T) {
	t.Parallel()
	fallback := newUpstream(t, "fallback")
	p := testParams(Buffered, FailOpen)
	p.ExtProc = deadEndpoint(t)
	p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
	env := startEnvoy(t, p)

	const kv = `{"do_remote_decode":true,"remote_host":"10.9.9.9","remote_port":5600,"nested":{"a":[1,{"b":"}"}]}}`
	stripped := []string{
		`{"model":"m","prompt":"hi","kv_transfer_params":` + kv + `}`,
		`{"kv_transfer_params":` + kv + `,"model":"m","prompt":"hi"}`,
		`{"model":"m","kv_transfer_params":` + kv + `,"kv_transfer_params":null,"prompt":"hi"}`,
		`{"model":"m","kv\u005ftransfer_params":` + kv + `,"prompt":"hi"}`,
		`{"model":"m","\u006b\u0076_transfer\/params":1,"kv_transfer_params\u0000":2,"kv_transfer_params":3}`,
		" \r\n{ \"model\" : \"m\" ,\t\"kv_transfer_params\" :\n" + kv + " , \"prompt\" : \"a \\\" kv_transfer_params\" }\n",
		`{"kv_transfer_params":{}}`,
		`{"model":"m","messages":[{"role":"user","content":"{\"kv_transfer_params\":1}"}],"kv_transfer_params":[1,2,"]"],"n":-1.5e3,"ok":true,"x":null}`,
		`{"model":"m","vllm_xargs":{"kv_transfer_params":"x"},"ec_transfer_params":{"a":1},"prompt":"hi"}`,
		"\xef\xbb\xbf{\"kv_transfer_params\":1,\"model\":\"m\"}",
	}
	kept := []string{
		`{"model":"m","prompt":"no params here","extra":{"kv_transfer_params":{"inner":"is not read by the engine"}}}`,
		`{}`,
		`{"model":"m","prompt":"\u00e9\ud83d\ude00"}`,
	}
	// Passed unread: a body that cannot spell a key to cut, JSON or not (the engine judges it).
	unread := []string{`not json`, `{"model":"m"`}
	// Refused: bodies that could hold a member (a name, a \u escape) but are not one JSON object.
	refused := []string{`[{"kv_transfer_params":1}]`, `{"model":"m","kv_transfer_params":1`, `{"model":"m","vllm_xargs":1,}`,
		`{"model" "ec_transfer_params"}`, `not json \u0041`, `{"kv_transfer_params":1} trailing`, `{"a":"\x","kv_transfer_params":1}`,
		"{\x00\"\x00k\x00v\x00_\x00t\x00\"\x00:\x001\x00}\x00"} // UTF-16LE, which the engine would decode

	post := func(body string) result {
		return send(t, env, http.MethodPost, "/v1/completions", []byte(body), nil)
	}
	for i, body := range append(stripped, kept...) {
		res := post(body)
		if res.status != http.StatusOK {
			t.Errorf("body %q: status %d %q; want 200 through decode_fallback", body, res.status, res.body)
			continue
		}
		var seen seenRequest
		select {
		case seen = <-fallback.reqs:
		case <-time.After(5 * time.Second):
			t.Fatalf("body %q: the fallback worker saw nothing", body)
		}
		var sent, got map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(body, "\xef\xbb\xbf")), &sent); err != nil {
			t.Fatalf("test body %q is not JSON: %v", body, err)
		}
		for _, k := range []string{"kv_transfer_params", "ec_transfer_params", "vllm_xargs"} {
			delete(sent, k)
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(string(seen.body), "\xef\xbb\xbf")), &got); err != nil {
			t.Errorf("body %q reached the worker as %q, which is not JSON: %v", body, seen.body, err)
			continue
		}
		if !reflect.DeepEqual(got, sent) {
			t.Errorf("body %q reached the worker as %q; want the same members without kv_transfer_params", body, seen.body)
		}
		if i >= len(stripped) && string(seen.body) != body {
			t.Errorf("body %q without the member was rewritten to %q", body, seen.body)
		}
		if cl := seen.header.Get("content-length"); cl != strconv.Itoa(len(seen.body)) {
			t.Errorf("body %q: content-length %q for %d bytes", body, cl, len(seen.body))
		}
	}
	for _, body := range refused {
		res := post(body)
		var e struct {
			Error struct {
				Type string
				Code int
			}
		}
		if res.status != http.StatusBadRequest || json.Unmarshal([]byte(res.body), &e) != nil || e.Error.Code != 400 ||
			e.Error.Type != "BadRequestError" {
			t.Errorf("body %q: status %d %q; want vLLM's 400 BadRequestError", body, res.status, res.body)
		}
	}
	if n := len(fallback.reqs); n != 0 {
		t.Errorf("%d refused bodies reached the worker", n)
	}
	for _, body := range unread {
		if res := post(body); res.status != http.StatusOK {
			t.Errorf("body %q: status %d; want it passed to the worker unread", body, res.status)
			continue
		}
		select {
		case seen := <-fallback.reqs:
			if string(seen.body) != body {
				t.Errorf("body %q reached the worker as %q", body, seen.body)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("body %q: the fallback worker saw nothing", body)
		}
	}
	// A body-less request still passes (GET /v1/models through the fallback).
	if res := send(t, env, http.MethodGet, "/v1/models", nil, nil); res.status != http.StatusOK {
		t.Errorf("GET /v1/models: status %d %q; want 200", res.status, res.body)
	}
}

// TestGuardCleansDecidedRequests: the guard also cleans requests the processor decided (they
// carry x-condisagg-route), in both fail-open profiles: a processor that routes a passthrough
// path without cleaning its body (condisagg before issue 23) does not let a client's
// kv_transfer_params reach the decode worker.
func TestGuardCleansDecidedRequests(t *testing.T) {
	t.Parallel()
	for _, mode := range []BodyMode{Buffered, Streamed} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			decode, fallback := newUpstream(t, "decode"), newUpstream(t, "fallback")
			p := testParams(mode, FailOpen)
			proc := &testProcessor{mode: mode, headers: make(chan map[string]string, 16), decide: func(string) (string, string) {
				return "decode", decode.srv.Listener.Addr().String()
			}}
			p.ExtProc = startProcessor(t, proc)
			p.DecodeFallback = []Endpoint{fallback.endpoint(t)}
			env := startEnvoy(t, p)
			body := `{"model":"m","input":"x","kv_transfer_params":{"remote_host":"10.9.9.9"},"vllm_xargs":{"a":1}}`
			if res := send(t, env, http.MethodPost, "/v1/responses", []byte(body), nil); res.status != http.StatusOK {
				t.Fatalf("status %d %q", res.status, res.body)
			}
			select {
			case seen := <-decode.reqs:
				if string(seen.body) != `{"model":"m","input":"x"}` {
					t.Errorf("the decode worker received %q; want the body without kv_transfer_params and vllm_xargs", seen.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the decode worker saw nothing")
			}
		})
	}
}
