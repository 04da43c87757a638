package route

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/condisagg/condisagg/internal/reqjson"
)

// Endpoint is the OpenAI API a request path names.
type Endpoint uint8

const (
	// EndpointOther is every path that is routed without a decision (passthrough).
	EndpointOther Endpoint = iota
	// EndpointChat is /v1/chat/completions.
	EndpointChat
	// EndpointCompletions is /v1/completions.
	EndpointCompletions
)

// String returns the endpoint's path ("other" for passthrough paths).
func (e Endpoint) String() string {
	switch e {
	case EndpointChat:
		return "/v1/chat/completions"
	case EndpointCompletions:
		return "/v1/completions"
	}
	return "other"
}

// ParseEndpoint maps a request :path (query string allowed) to its Endpoint.
func ParseEndpoint(path string) Endpoint {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if strings.IndexByte(path, '%') >= 0 {
		// The engine's HTTP server routes on the percent-decoded path (ASGI scope["path"]), so
		// /v1/chat/%63ompletions is a chat request there and must be one here too.
		dec, err := url.PathUnescape(path)
		if err != nil {
			return EndpointOther // not a path the engine routes to a completion handler either
		}
		path = dec
	}
	path = strings.TrimSuffix(path, "/")
	switch path {
	case "/v1/chat/completions":
		return EndpointChat
	case "/v1/completions":
		return EndpointCompletions
	}
	return EndpointOther
}

// ErrInvalidBody is wrapped by every body the router refuses with 400.
var ErrInvalidBody = errors.New("invalid request body")

// Body is the part of an OpenAI body that routing reads. The tokenizer reads the
// prompt itself (messages, tools, chat_template_kwargs, prompt); Body only checks that it
// is there and records how the answer will be streamed.
type Body struct {
	Endpoint     Endpoint
	Model        string
	Stream       bool // "stream": true — the answer is Server-Sent Events
	IncludeUsage bool // stream_options.include_usage
	// EngineControl: the client sent a member only pd-sidecar may set (kv_transfer_params and
	// the others of EngineControlFields); the body must be cleaned (Clean) before it reaches a
	// worker.
	EngineControl bool
	// CacheSalt is the request's cache_salt (vLLM, SGLang, TRT-LLM through Dynamo): it seeds
	// the prompt's first block key, so the request shares cached blocks only with requests of
	// the same salt ("" : none), as each engine's events key them (kvevents README).
	CacheSalt string
}

// ParseBody checks an OpenAI body of endpoint ep and returns its routing fields. Every
// refusal wraps ErrInvalidBody and says what is wrong in OpenAI terms.
func ParseBody(ep Endpoint, body []byte) (Body, error) {
	if req, ok := scanBody(ep, body); ok {
		return req, nil
	}
	return decodeBody(ep, body)
}

// decodeBody is ParseBody with the exact reading of vLLM's server (reqjson: Python's json.loads
// with exact, case-sensitive keys, then pydantic's lax mode): the slow path, with exact messages.
func decodeBody(ep Endpoint, body []byte) (Body, error) {
	req := Body{Endpoint: ep}
	obj, err := reqjson.Parse(body)
	if err != nil {
		return req, invalidBody("request body is not a valid JSON object: %s", err)
	}
	mv, _ := obj.Get("model")
	if mv.IsNull() {
		return req, invalidBody("missing required field %q", "model")
	}
	if req.Model, err = mv.Str(); err != nil {
		return req, invalidBody("field %q must be a string, not %s", "model", mv.Kind())
	}
	if req.Model == "" {
		return req, invalidBody("missing required field %q", "model")
	}
	switch ep {
	case EndpointChat:
		m, _ := obj.Get("messages")
		if m.IsNull() {
			return req, invalidBody("missing required field %q", "messages")
		}
		if m.Kind() != reqjson.KindArray || isEmptyArray(m) {
			return req, invalidBody("field %q must be a non-empty array", "messages")
		}
	case EndpointCompletions:
		if !obj.Has("prompt") {
			return req, invalidBody("missing required field %q", "prompt")
		}
	}
	if req.Stream, err = laxBool(obj, "stream", "stream"); err != nil {
		return req, err
	}
	if so, ok := obj.Get("stream_options"); ok && !so.IsNull() {
		opts, err := so.Object()
		if err != nil {
			return req, invalidBody("field %q must be an object, not %s", "stream_options", so.Kind())
		}
		if req.IncludeUsage, err = laxBool(opts, "include_usage", "stream_options.include_usage"); err != nil {
			return req, err
		}
	}
	for _, m := range obj.Members {
		req.EngineControl = req.EngineControl || IsEngineControl(m.Key)
	}
	if cs, ok := obj.Get("cache_salt"); ok && !cs.IsNull() {
		if req.CacheSalt, err = cs.Str(); err != nil {
			return req, invalidBody("field %q must be a string, not %s", "cache_salt", cs.Kind())
		}
	}
	return req, nil
}

// laxBool reads an optional bool member as pydantic's lax mode does ("true", 1, "yes", ...);
// field names it in the error.
func laxBool(obj reqjson.Object, key, field string) (bool, error) {
	v, ok := obj.Get(key)
	if !ok || v.IsNull() {
		return false, nil
	}
	b, err := v.Bool()
	if err != nil {
		return false, invalidBody("field %q must be a boolean (true, false, \"true\", 1, ...), not %.40s", field, v)
	}
	return b, nil
}

func invalidBody(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidBody, fmt.Sprintf(format, args...))
}

func isEmptyArray(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	inner := bytes.TrimSpace(raw[1:])
	return len(inner) > 0 && inner[0] == ']'
}
