package route

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
)

// UpdateSilence evaluates every worker's KV event stream at now (conditional-disagg.md
// §8.3), sets silent (condisagg_kv_events_silent_workers{pool}, nil: no gauge) and returns the
// workers whose state changed since the previous call (for one warning per transition). prev
// is the previous silent set and is updated in place. Without EventStreams nothing is ever
// silent. Every model's workers count (worker ids are unique across models).
func (r *Router) UpdateSilence(now time.Time, prev map[string]bool, silent *prometheus.GaugeVec) (changed []string) {
	rule := r.policy.Load().Silence
	counts := map[pool.Role]int{pool.RoleDecode: 0, pool.RolePrefill: 0}
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
		return nil
	}
	if silent != nil {
		for role, n := range counts {
			silent.WithLabelValues(string(role)).Set(float64(n))
		}
	}
	return changed
}
