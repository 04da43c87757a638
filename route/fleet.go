package route

import (
	"time"

	"github.com/condisagg/condisagg/fleet"
	"github.com/condisagg/condisagg/policy"
)

// fleetOn reports whether decisions under cfg read and feed the model's fleet view: only the
// slo policy with slo_fleet uses it, so the other policies pay nothing for it.
func fleetOn(cfg *policy.Config) bool {
	return cfg.Disagg.Policy == policy.SLOKind && cfg.Disagg.SLOFleet
}

// fleetView is the model's fleet view at now, given the snapshot's booked prefill queues.
func (m *model) fleetView(snap *policy.Snapshot, now time.Time) policy.FleetView {
	var dq, pq int64
	for i := range snap.Decode {
		dq += snap.Decode[i].ActivePrefillTokens
	}
	for i := range snap.Prefill {
		pq += snap.Prefill[i].ActivePrefillTokens
	}
	return m.fleet.View(now, dq, pq)
}

// fleetPool is the pool a route's prefill runs on.
func fleetPool(r policy.Route) fleet.Pool {
	if r == policy.RouteDecode {
		return fleet.Decode
	}
	return fleet.Prefill
}

// fleetBooked counts a booked decision in the model's fleet view.
func (m *model) fleetBooked(dec *policy.Decision, isl int, now time.Time) {
	m.fleet.Booked(now, fleetPool(dec.Route), dec.PrefillTokens, int64(isl)-dec.PrefillTokens)
}
