package extproc

import (
	"context"
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/route"
)

// Router is the decision pipeline as the ext_proc server uses it: decisions and fallbacks
// (whose tickets the response phase reports to), the worker health the responses inform, the
// policy and candidate configs a reload swaps, and the event-stream silence check.
// *route.Router satisfies it.
type Router interface {
	Decide(ctx context.Context, req *route.Request) (route.Outcome, error)
	Fallback(ctx context.Context, req *route.Request, reason policy.Reason) (route.Outcome, error)
	ReportUpstream(workerID string, status int, connectFailure bool)
	SetPolicy(c *policy.Config) error
	ShadowConfig() *policy.Config
	SetShadow(c *policy.Config) error
	UpdateSilence(now time.Time, prev map[string]bool) route.Silence
}
