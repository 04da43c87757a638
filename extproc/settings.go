package extproc

import (
	"errors"
	"fmt"

	"github.com/condisagg/condisagg/policy"
)

// FailureMode says what an internal routing failure does (ARCHITECTURE §2).
type FailureMode string

const (
	// FailOpen routes to the least-loaded decode worker (local prefill), nothing booked.
	FailOpen FailureMode = "open"
	// FailClosed answers 503.
	FailClosed FailureMode = "closed"
)

// DefaultMaxBodyBytes is the default request body limit (10 MiB, as GIE's lwepp).
const DefaultMaxBodyBytes = 10 << 20

// MaxMaxBodyBytes bounds max_body_bytes (1 GiB): the gRPC message limit is derived from it and
// a body is held in memory whole.
const MaxMaxBodyBytes = 1 << 30

// Settings are the reloadable knobs of the ext_proc path. A validated Settings is never
// modified; a reload validates a new one and swaps it in.
type Settings struct {
	Policy       *policy.Config // validated
	MaxBodyBytes int
	FailureMode  FailureMode
	DebugHeaders bool // x-condisagg-decision on the request and the response
	LLMDCompat   bool // x-prefiller-host-port on the remote path
}

// Validate returns every problem of s in the field/value/rule form.
func (s *Settings) Validate() error {
	var errs []error
	if s.Policy == nil {
		errs = append(errs, errors.New("extproc: settings: policy config is required"))
	}
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > MaxMaxBodyBytes {
		errs = append(errs, fmt.Errorf("max_body_bytes: %d is outside [1, %d]", s.MaxBodyBytes, MaxMaxBodyBytes))
	}
	if s.FailureMode != FailOpen && s.FailureMode != FailClosed {
		errs = append(errs, fmt.Errorf("failure_mode: %q must be one of open, closed", s.FailureMode))
	}
	return errors.Join(errs...)
}
