package sidecar

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an answer the sidecar makes itself, sent as an OpenAI-style JSON error
// (envoy-extproc.md §4): {"error":{"message","type","param":null,"code"}}.
type apiError struct {
	status  int
	typ     string
	code    string // the reason: also the X-Condisagg-Error header and the metric label
	message string
}

// The error types of the answers the sidecar makes.
const (
	typeInvalidRequest = "invalid_request_error"
	typePermission     = "permission_error"
	typeUpstream       = "upstream_error"
	typeTimeout        = "timeout_error"
)

func errHostNotAllowed(header, value string) *apiError {
	return &apiError{http.StatusForbidden, typePermission, "host_not_allowed",
		header + " " + strconv.Quote(truncate(value, 80)) + " is not an allowed worker host:port"}
}

func errNoDecodeHost() *apiError {
	return &apiError{http.StatusForbidden, typePermission, "no_decode_host",
		HeaderDecodeHost + " is missing and no default decode host is configured"}
}

func errInvalidRank(header, value string) *apiError {
	return &apiError{http.StatusBadRequest, typeInvalidRequest, "invalid_rank",
		header + " " + strconv.Quote(truncate(value, 80)) + " must be one data-parallel rank, a decimal integer in [0, 65535]"}
}

func errBodyTooLarge(limit int64) *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, typeInvalidRequest, "body_too_large",
		"request body exceeds " + strconv.FormatInt(limit, 10) + " bytes"}
}

func errInvalidBody(err error) *apiError {
	return &apiError{http.StatusBadRequest, typeInvalidRequest, "invalid_body",
		"request body must be a JSON object: " + err.Error()}
}

func errBodyRead() *apiError {
	return &apiError{http.StatusBadRequest, typeInvalidRequest, "body_read_failed", "reading the request body failed"}
}

// upstreamError is the answer for a leg that produced no usable HTTP response.
func upstreamError(lg leg, reason string) *apiError {
	if reason == reasonTimeout {
		return &apiError{http.StatusGatewayTimeout, typeTimeout, string(lg) + "_timeout",
			"the " + string(lg) + " worker did not answer in time"}
	}
	return &apiError{http.StatusBadGateway, typeUpstream, string(lg) + "_" + reason,
		"the " + string(lg) + " worker failed: " + reason}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// write sends e with the request id; 503 and 429 carry Retry-After.
func (e *apiError) write(w http.ResponseWriter, requestID string) {
	body, _ := json.Marshal(errorBody{errorDetail{Message: e.message, Type: e.typ, Code: e.code}}) // cannot fail: plain strings
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set(HeaderError, e.code)
	h.Set(HeaderRequestID, requestID)
	if e.status == http.StatusServiceUnavailable || e.status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
