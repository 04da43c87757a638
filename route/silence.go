package route

import (
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// Silence is one evaluation of the workers' KV event streams.
type Silence struct {
	// Changed are the workers whose state changed since the previous evaluation (for one
	// warning per transition).
	Changed []string
	// Silent counts the silent workers per role (both roles present); nil when no model has
	// event streams, so there is nothing to report.
	Silent map[pool.Role]int
}

// UpdateSilence evaluates every worker's KV event stream at now (conditional-disagg.md §8.3).
// prev is the previous silent set and is updated in place. Without EventStreams nothing is
// ever silent. Every model's workers count (worker ids are unique across models).
func (r *Router) UpdateSilence(now time.Time, prev map[string]bool) Silence {
	rule := r.policy.Load().Silence
	counts := map[pool.Role]int{pool.RoleDecode: 0, pool.RolePrefill: 0}
	var changed []string
	streams := false
	for _, m := range r.models {
		if m.streams == nil {
			continue
		}
		streams = true
		for _, w := range m.pool.Workers() {
			s := policy.Silent(m.streams.Stream(w.ID, now), now, rule)
			if s {
				counts[w.Role]++
			}
			if prev[w.ID] != s {
				changed = append(changed, w.ID)
				prev[w.ID] = s
			}
		}
	}
	if !streams {
		return Silence{}
	}
	return Silence{Changed: changed, Silent: counts}
}
