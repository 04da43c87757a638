package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/condisagg/condisagg/route"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrBodyTooLarge: the request body is over Settings.MaxBodyBytes (413).
var ErrBodyTooLarge = errors.New("request body too large")

// errUncleanable: a request body that is not one JSON object as the engine reads it, so its
// engine-control members cannot be cut: refused with vLLM's own 400.
var errUncleanable = errors.New("request body cannot be cleaned")

// httpError is one immediate-response error (envoy-extproc.md §4 table).
type httpError struct {
	Status  int
	Type    string
	Reason  string
	Message string
	// Param and VLLMCode: the error is one a vLLM engine would give itself, so the body is
	// vLLM's (param named, code the HTTP status as a number) instead of condisagg's reason.
	Param    string
	VLLMCode bool
}

// toHTTPError maps a routing error to its immediate response. It is the only place that
// decides status codes; internal errors reach it only under --failure-mode closed.
func toHTTPError(err error) *httpError {
	switch {
	case errors.Is(err, route.ErrUnknownModel):
		// vLLM's answer for a model it does not serve (OpenAIServing._check_model).
		return &httpError{Status: 404, Type: "NotFoundError", Reason: "unknown_model", Message: unknownModelText(err),
			Param: "model", VLLMCode: true}
	case errors.Is(err, errUncleanable):
		// vLLM's answer to a body its JSON parser refuses (a RequestValidationError).
		return &httpError{Status: 400, Type: "BadRequestError", Reason: "unreadable_body", Message: err.Error(), VLLMCode: true}
	case errors.Is(err, route.ErrPromptTooLong):
		// vLLM's answer for a prompt over max_model_len (renderers/params.py), word for word.
		var le vllmParamError
		if errors.As(err, &le) {
			return &httpError{Status: 400, Type: "BadRequestError", Reason: "prompt_too_long", Message: le.Error(),
				Param: le.Param(), VLLMCode: true}
		}
		return &httpError{Status: 400, Type: "BadRequestError", Reason: "prompt_too_long", Message: err.Error(), VLLMCode: true}
	case errors.Is(err, route.ErrInvalidBody):
		return &httpError{Status: 400, Type: "invalid_request_error", Reason: "invalid_body", Message: err.Error()}
	case errors.Is(err, ErrBodyTooLarge):
		return &httpError{Status: 413, Type: "invalid_request_error", Reason: "body_too_large", Message: err.Error()}
	case errors.Is(err, route.ErrSubsetNoMatch):
		return &httpError{Status: 503, Type: "service_unavailable_error", Reason: "subset_no_match", Message: err.Error()}
	case errors.Is(err, route.ErrNoEligibleWorker):
		return &httpError{Status: 503, Type: "service_unavailable_error", Reason: "no_eligible_worker", Message: err.Error()}
	case errors.Is(err, ErrOverloaded):
		return &httpError{Status: 503, Type: "service_unavailable_error", Reason: "overloaded", Message: err.Error()}
	default:
		return &httpError{Status: 503, Type: "service_unavailable_error", Reason: "internal", Message: "internal routing failure"}
	}
}

// vllmParamError is an error vLLM would raise with a parameter name (route.ErrPromptTooLong's).
type vllmParamError interface {
	error
	Param() string
}

// unknownModelText is the refusal's text without wrapping.
func unknownModelText(err error) string {
	var ue *route.UnknownModelError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	return err.Error()
}

// streamEnd maps how a Process stream ended to its gRPC result and the stream-error label
// ("" when the end is normal: EOF or the client went away). It is the only place that turns
// errors into gRPC status codes.
func streamEnd(op string, err error) (error, string) {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil, ""
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return nil, ""
	case codes.OK, codes.Unknown:
	default:
		return err, op
	}
	return status.Errorf(codes.Unavailable, "extproc: %s: %v", op, err), op
}

// idleError is the immediate response of a stream that waited longer than
// stream_idle_timeout for the rest of its request.
func idleError(idle time.Duration) *httpError {
	return &httpError{Status: 408, Type: "invalid_request_error", Reason: "stream_idle_timeout",
		Message: fmt.Sprintf("the request was not received completely: nothing arrived for %s (stream_idle_timeout)", idle)}
}

// requestTimeoutError is the immediate response of a stream whose request phase took longer
// than stream_request_timeout, however steadily its bytes came.
func requestTimeoutError(d time.Duration) *httpError {
	return &httpError{Status: 408, Type: "invalid_request_error", Reason: "stream_request_timeout",
		Message: fmt.Sprintf("the request was not received completely within %s (stream_request_timeout)", d)}
}

// requestTimeoutStatus is the gRPC result of a stream ended by stream_request_timeout.
func requestTimeoutStatus(d time.Duration) error {
	return status.Errorf(codes.DeadlineExceeded, "extproc: request phase longer than %s (stream_request_timeout)", d)
}

// idleStatus is the gRPC result of a stream ended by stream_idle_timeout.
func idleStatus(idle time.Duration) error {
	return status.Errorf(codes.DeadlineExceeded, "extproc: stream idle for %s awaiting the request (stream_idle_timeout)", idle)
}
