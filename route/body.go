package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
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
	// KVTransferParams: the client sent kv_transfer_params, which only pd-sidecar may set; the
	// body must be cleaned (StripMember) before it reaches a worker.
	KVTransferParams bool
	// CacheSalt is vLLM's cache_salt: it seeds the prompt's first block, so the request shares
	// cached blocks only with requests of the same salt ("" : none).
	CacheSalt string
}

// openAIBody is the typed view of the routing fields of both endpoints.
type openAIBody struct {
	Model         *string         `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        *bool           `json:"stream"`
	CacheSalt     *string         `json:"cache_salt"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// ParseBody checks an OpenAI body of endpoint ep and returns its routing fields. Every
// refusal wraps ErrInvalidBody and says what is wrong in OpenAI terms.
func ParseBody(ep Endpoint, body []byte) (Body, error) {
	if req, ok := scanBody(ep, body); ok {
		return req, nil
	}
	return decodeBody(ep, body)
}

// decodeBody is ParseBody with encoding/json: the slow path with exact messages.
func decodeBody(ep Endpoint, body []byte) (Body, error) {
	req := Body{Endpoint: ep}
	var b openAIBody
	if err := json.Unmarshal(body, &b); err != nil {
		return req, invalidBody("request body is not a valid JSON object: %s", jsonErrorText(err))
	}
	if b.Model == nil || *b.Model == "" {
		return req, invalidBody("missing required field %q", "model")
	}
	req.Model = *b.Model
	switch ep {
	case EndpointChat:
		m := bytes.TrimSpace(b.Messages)
		if len(m) == 0 || bytes.Equal(m, []byte("null")) {
			return req, invalidBody("missing required field %q", "messages")
		}
		if m[0] != '[' || isEmptyArray(m) {
			return req, invalidBody("field %q must be a non-empty array", "messages")
		}
	case EndpointCompletions:
		p := bytes.TrimSpace(b.Prompt)
		if len(p) == 0 || bytes.Equal(p, []byte("null")) {
			return req, invalidBody("missing required field %q", "prompt")
		}
	}
	if b.Stream != nil {
		req.Stream = *b.Stream
	}
	if b.StreamOptions != nil && b.StreamOptions.IncludeUsage != nil {
		req.IncludeUsage = *b.StreamOptions.IncludeUsage
	}
	req.KVTransferParams = HasMember(body, FieldKVTransferParams)
	if b.CacheSalt != nil {
		req.CacheSalt = *b.CacheSalt
	}
	return req, nil
}

func invalidBody(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidBody, fmt.Sprintf(format, args...))
}

// jsonErrorText shortens encoding/json errors to what a client can act on.
func jsonErrorText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must not be a JSON %s", te.Field, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

func isEmptyArray(raw []byte) bool {
	inner := bytes.TrimSpace(raw[1:])
	return len(inner) > 0 && inner[0] == ']'
}
