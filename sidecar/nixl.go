package sidecar

import (
	"errors"
	"fmt"
	"strconv"
)

// The request fields the NixlConnector flow touches (vllm-kv-events.md §6.3).
const (
	keyKVTransferParams    = "kv_transfer_params"
	keyStream              = "stream"
	keyStreamOptions       = "stream_options"
	keyMaxTokens           = "max_tokens"
	keyMaxCompletionTokens = "max_completion_tokens"
	keyMaxOutputTokens     = "max_output_tokens"
	keyMinTokens           = "min_tokens"
	keyMinCompletionTokens = "min_completion_tokens"
	keyUsage               = "usage"
	keyPromptTokensDetails = "prompt_tokens_details"
	keyCachedTokens        = "cached_tokens"
	// keyRemotePrefillCachedTokens is the member vLLM 0.32 adds to P's kv_transfer_params (its
	// own prefix-cache hit). D reports it as its cached_tokens when it finds it, whatever it
	// loaded, so the decode leg never carries it (docs/disagg-truth.md §1).
	keyRemotePrefillCachedTokens = "remote_prefill_cached_tokens"
)

// The OpenAI paths that take the remote-prefill flow; every other request passes through.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathResponses       = "/v1/responses"
)

// prefillKVTransferParams is the kv_transfer_params of the prefill leg (§6.3 step 2).
const prefillKVTransferParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

const (
	jsonFalse = "false"
	jsonOne   = "1"
	jsonNull  = "null"
)

// Sentinel errors of the prefill answer, matched with errors.Is.
var (
	ErrNoKVTransferParams = errors.New("prefill response has no kv_transfer_params object")
)

// isRemotePath reports whether a request path takes the remote-prefill flow.
func isRemotePath(path string) bool {
	return path == pathCompletions || path == pathChatCompletions || path == pathResponses
}

// prefillBody is the client's request rewritten for the prefill leg (§6.3 step 2): one
// non-streamed token, no minimum, and do_remote_decode. /v1/responses limits output with
// max_output_tokens instead of max_tokens.
func prefillBody(req object, path string) []byte {
	limit := edit{key: keyMaxTokens, op: opSet, value: []byte(jsonOne)}
	if path == pathResponses {
		limit.key = keyMaxOutputTokens
	}
	return req.rewrite(
		edit{key: keyStream, op: opSet, value: []byte(jsonFalse)},
		limit,
		edit{key: keyMaxCompletionTokens, op: opSetIfPresent, value: []byte(jsonOne)},
		edit{key: keyStreamOptions, op: opDelete},
		edit{key: keyMinTokens, op: opDelete},
		edit{key: keyMinCompletionTokens, op: opDelete},
		edit{key: keyKVTransferParams, op: opSet, value: []byte(prefillKVTransferParams)},
	)
}

// decodeBody is the client's request with the decode leg's kv_transfer_params (§6.3 step 4,
// prefillAnswer.kvTransferParams). Any kv_transfer_params the client sent is replaced.
func decodeBody(req object, kvTransferParams []byte) []byte {
	return req.rewrite(edit{key: keyKVTransferParams, op: opSet, value: kvTransferParams})
}

// localBody is the client's request without kv_transfer_params: local prefill at D (§6.3
// step 5 fallback), and the passthrough path, so a client cannot steer D's KV pull.
func localBody(req object) []byte {
	return req.rewrite(edit{key: keyKVTransferParams, op: opDelete})
}

// prefillAnswer is what the decode leg needs from P's response (§6.3 step 3).
type prefillAnswer struct {
	// kvTransferParams is P's object for the decode leg: verbatim but for
	// remote_prefill_cached_tokens, which is removed so that D reports what it loaded and
	// computed itself (docs/disagg-truth.md).
	kvTransferParams []byte
	// cachedTokens is P's own prefix-cache hit: kv_transfer_params.remote_prefill_cached_tokens
	// (vLLM 0.32), else usage.prompt_tokens_details.cached_tokens.
	cachedTokens int64
	cachedKnown  bool // cachedTokens was present as a non-negative integer
}

// parsePrefillAnswer extracts kv_transfer_params (opaque; must be an object) and P's cached
// token count from P's non-streamed JSON response.
func parsePrefillAnswer(body []byte) (prefillAnswer, error) {
	obj, err := parseObject(body)
	if err != nil {
		return prefillAnswer{}, fmt.Errorf("prefill response: %w", err)
	}
	kv := obj.last(keyKVTransferParams)
	if !isObject(kv) {
		return prefillAnswer{}, fmt.Errorf("prefill response: kv_transfer_params=%.40q: %w", kv, ErrNoKVTransferParams)
	}
	ans := prefillAnswer{kvTransferParams: kv}
	if params, err := parseObject(kv); err == nil && params.has(keyRemotePrefillCachedTokens) {
		ans.cachedTokens, ans.cachedKnown = nonNegative(params.last(keyRemotePrefillCachedTokens))
		ans.kvTransferParams = params.rewrite(edit{key: keyRemotePrefillCachedTokens, op: opDelete})
	}
	if !ans.cachedKnown {
		ans.cachedTokens, ans.cachedKnown = cachedTokens(obj)
	}
	return ans, nil
}

// nonNegative reads a JSON integer that is at least 0.
func nonNegative(raw []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil && n >= 0
}

// cachedTokens reads usage.prompt_tokens_details.cached_tokens of a response object.
func cachedTokens(resp object) (int64, bool) {
	details, ok := usageDetails(resp)
	if !ok {
		return 0, false
	}
	return nonNegative(details.last(keyCachedTokens))
}

func usageDetails(resp object) (object, bool) {
	usage := resp.last(keyUsage)
	if !isObject(usage) {
		return object{}, false
	}
	u, err := parseObject(usage)
	if err != nil {
		return object{}, false
	}
	d := u.last(keyPromptTokensDetails)
	if !isObject(d) {
		return object{}, false
	}
	details, err := parseObject(d)
	return details, err == nil
}
