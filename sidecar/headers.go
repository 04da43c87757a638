package sidecar

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Header names of the contract (ARCHITECTURE.md §2) and of the request id.
const (
	HeaderPrefillHost       = "X-Condisagg-Prefill-Host"
	HeaderDecodeHost        = "X-Condisagg-Decode-Host"
	HeaderPrefillerHostPort = "X-Prefiller-Host-Port" // llm-d compatibility: read when HeaderPrefillHost is absent
	HeaderDestination       = "X-Gateway-Destination-Endpoint"
	HeaderRequestID         = "X-Request-Id"
	HeaderError             = "X-Condisagg-Error"
	// HeaderPrefillRank and HeaderDecodeRank carry the data-parallel rank of P and D (set by
	// condisagg only when the worker's server runs more than one rank). The sidecar sends each
	// leg its own HeaderDPRank from them.
	HeaderPrefillRank = "X-Condisagg-Prefill-Rank"
	HeaderDecodeRank  = "X-Condisagg-Decode-Rank"
	// HeaderDPRank is the header vLLM reads to pin a request to one data-parallel engine
	// (vLLM spells it X-data-parallel-rank; header names are case-insensitive). A received
	// one is never forwarded: each leg gets the rank of its own worker, or none.
	HeaderDPRank = "X-Data-Parallel-Rank"
	// HeaderPrefillMs is set on the response of a request that ran a prefill leg (remote or
	// failed over to local): the prefill leg's duration in milliseconds. It tells the router the
	// prefill worker is done with the request when the response starts, not at its first token
	// (conditional-disagg.md §5.2).
	HeaderPrefillMs = "X-Condisagg-Prefill-Ms"
	// HeaderPrefillCachedTokens is set on the response of a remote request: the prefill
	// worker's own prefix-cache hit in tokens (vLLM 0.32's remote_prefill_cached_tokens, else
	// P's usage.prompt_tokens_details.cached_tokens). Absent when P reported neither.
	HeaderPrefillCachedTokens = "X-Condisagg-Prefill-Cached-Tokens"
	// HeaderKVTransfer says what happened to the KV the prefill leg computed (one of the
	// KVTransfer* values), so that the router can classify the request without trusting a
	// count the decode engine may have copied from the prefill engine
	// (docs/disagg-truth.md).
	HeaderKVTransfer = "X-Condisagg-KV-Transfer"
)

// Values of HeaderKVTransfer.
const (
	// KVTransferPulled: D ran the decode leg with P's kv_transfer_params, without
	// remote_prefill_cached_tokens, so D's usage reports its own count (the whole prompt
	// after a complete pull).
	KVTransferPulled = "pulled"
	// KVTransferRewritten: as pulled, but D's cached_tokens was replaced with P's
	// (--rewrite-usage): the answer no longer says whether D used the KV.
	KVTransferRewritten = "rewritten"
	// KVTransferFailed: D could not load the KV (an error answer under vLLM's
	// kv_load_failure_policy "fail"), and the sidecar sent the request again to D without
	// kv_transfer_params, so D prefilled it locally.
	KVTransferFailed = "failed"
	// KVTransferFallback: the prefill leg failed and D prefilled locally.
	KVTransferFallback = "fallback"
)

// maxRank bounds a rank header's value (vLLM --data-parallel-size is far smaller).
const maxRank = 65535

// maxRequestIDLen bounds a client-supplied X-Request-Id; a longer or non-printable one is
// replaced by a fresh UUID4.
const maxRequestIDLen = 128

// isHopByHop reports the RFC 9110 §7.6.1 connection-specific headers (plus the legacy ones
// every proxy drops); they are never forwarded in either direction.
func isHopByHop(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// isRoutingHeader reports whether a header belongs to the routing contract. Such headers are
// read by the sidecar and never forwarded to a worker; '_' spellings count too.
func isRoutingHeader(name string) bool {
	n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	return strings.HasPrefix(n, "x-condisagg-") || n == "x-gateway-destination-endpoint" ||
		n == "x-prefiller-host-port" || n == "x-prefiller-url" || n == "x-data-parallel-rank"
}

// dropped reports whether a header is hop-by-hop, named by the Connection header,
// Content-Length (recomputed per leg) or Expect (the sidecar already has the whole body).
func dropped(name string, connTokens []string) bool {
	if isHopByHop(name) || strings.EqualFold(name, "Expect") {
		return true
	}
	for _, t := range connTokens {
		if strings.EqualFold(name, t) {
			return true
		}
	}
	return strings.EqualFold(name, "Content-Length")
}

func connectionTokens(h http.Header) []string {
	var out []string
	for _, v := range h["Connection"] {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// outboundHeader is the header sent on both legs: the client's end-to-end headers without the
// routing contract, plus X-Request-Id and X-Forwarded-For.
func outboundHeader(r *http.Request, requestID string) http.Header {
	conn := connectionTokens(r.Header)
	h := make(http.Header, len(r.Header)+2)
	for k, vs := range r.Header {
		if dropped(k, conn) || isRoutingHeader(k) || k == HeaderRequestID {
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	h[HeaderRequestID] = []string{requestID}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h["X-Forwarded-For"] = []string{ip}
	}
	return h
}

// prefillHeader is outboundHeader for P: its JSON answer is parsed, so ask for no encoding;
// the data-parallel rank is P's (rank "" = none), not D's.
func prefillHeader(h http.Header, rank string) http.Header {
	p := h.Clone()
	p["Accept-Encoding"] = []string{"identity"}
	delete(p, HeaderDPRank)
	if rank != "" {
		p[HeaderDPRank] = []string{rank}
	}
	return p
}

// parseRank reads one data-parallel rank header: absent is "" (no rank); present, it must be
// one decimal integer in [0, maxRank], returned in canonical form.
func parseRank(h http.Header, name string) (string, *apiError) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		v := strings.TrimSpace(vs[0])
		if v == "" || len(v) > 5 || strings.Trim(v, "0123456789") != "" {
			return "", errInvalidRank(name, vs[0])
		}
		n, err := strconv.Atoi(v)
		if err != nil || n > maxRank {
			return "", errInvalidRank(name, vs[0])
		}
		return strconv.Itoa(n), nil
	}
	return "", errInvalidRank(name, strings.Join(vs, ","))
}

// copyResponseHeader copies an upstream response's end-to-end headers to the client.
func copyResponseHeader(dst, src http.Header, keepLength bool) {
	conn := connectionTokens(src)
	for k, vs := range src {
		if dropped(k, conn) && (!keepLength || !strings.EqualFold(k, "Content-Length")) {
			continue
		}
		if strings.HasPrefix(strings.ToLower(k), "x-condisagg-") {
			continue // the contract's headers come from the sidecar, never from a worker
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// requestID returns the client's X-Request-Id when it is usable, else a new UUID4.
func requestID(h http.Header) string {
	if v := h.Get(HeaderRequestID); v != "" && len(v) <= maxRequestIDLen && printable(v) {
		return v
	}
	return newUUID4()
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// newUUID4 returns a random RFC 9562 version-4 UUID in its 36-character text form.
func newUUID4() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (it crashes the program instead)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
