package policy

// Affinity is what became of a request's session binding (soft session affinity): the
// session names the worker that served its last turn (Input.Affinity), and the decision either
// placed the request there or says why not. Its String is the `outcome` metric label.
type Affinity uint8

const (
	AffinityNone     Affinity = iota // no session id, or affinity off
	AffinityMiss                     // a session with no binding (its first turn, or the binding expired)
	AffinityHit                      // placed on the bound worker
	AffinityGuard                    // the decode-busy guard (or the worker's KV room) barred the bound worker
	AffinityForecast                 // the slo forecast on the bound worker breaks the objective
	AffinityGone                     // the bound worker is not a candidate (left, unhealthy, outside the subset or a pin)
	numAffinities
)

func (a Affinity) String() string {
	switch a {
	case AffinityMiss:
		return "miss"
	case AffinityHit:
		return "hit"
	case AffinityGuard:
		return "overridden_guard"
	case AffinityForecast:
		return "overridden_forecast"
	case AffinityGone:
		return "worker_gone"
	}
	return "none"
}

// Affinities lists every outcome of a session that has an id, for pre-creating label sets.
func Affinities() []Affinity {
	return []Affinity{AffinityMiss, AffinityHit, AffinityGuard, AffinityForecast, AffinityGone}
}

// boundDecode is the snapshot index of the session's bound decode worker when it is a
// candidate (eligible and within the decode pin only, -1 = none), and the outcome so far:
// AffinityHit when it may be preferred, AffinityGone or AffinityGuard when not, AffinityNone
// when the request has no binding or the worker is not a decode worker.
func boundDecode(cfg *Config, in *Input, snap *Snapshot, only int) (int, Affinity) {
	if in.Affinity == "" {
		return -1, AffinityNone
	}
	b := find(snap.Decode, in.Affinity)
	if b < 0 {
		if find(snap.Prefill, in.Affinity) >= 0 {
			return -1, AffinityNone // a prefill worker: only the slo policy places there
		}
		return -1, AffinityGone
	}
	if only >= 0 && b != only {
		return -1, AffinityGone
	}
	l := &snap.Decode[b]
	switch cfg.Guard().CheckLoad(l.ProjectedDecodeBlocks(), l.KVCapacityBlocks, l.ReportedKVUsage) {
	case VerdictBusy, VerdictCapacityUnknown:
		return -1, AffinityGuard
	}
	return b, AffinityHit
}
