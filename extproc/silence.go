package extproc

import (
	"time"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// UpdateSilence evaluates every worker's KV event stream at now (conditional-disagg.md
// §8.3), sets condisagg_kv_events_silent_workers{pool} and returns the workers whose state
// changed since the previous call (for one warning per transition). prev is the previous
// silent set and is updated in place. Without EventStreams nothing is ever silent.
func (r *Router) UpdateSilence(now time.Time, prev map[string]bool) (changed []string) {
	if r.streams == nil {
		return nil
	}
	silence := r.settings.Load().Policy.Silence
	counts := map[pool.Role]int{pool.RoleDecode: 0, pool.RolePrefill: 0}
	for _, w := range r.pool.Workers() {
		silent := policy.Silent(r.streams.Stream(w.ID, now), now, silence)
		if silent {
			counts[w.Role]++
		}
		if prev[w.ID] != silent {
			changed = append(changed, w.ID)
			prev[w.ID] = silent
		}
	}
	for role, n := range counts {
		r.metrics.SilentWorkers.WithLabelValues(string(role)).Set(float64(n))
	}
	return changed
}
