package bookbus

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the bus's gauge and counters; the peer bookings held are the pool's
// condisagg_peer_bookings.
type Metrics struct {
	Connected  prometheus.Gauge       // condisagg_bus_connected: 1 up, 0 down (booking locally)
	Sent       prometheus.Counter     // deltas and heartbeats published
	Received   prometheus.Counter     // peers' deltas and heartbeats applied
	Dropped    *prometheus.CounterVec // reason: deltas not sent or not applied
	Reconnects prometheus.Counter     // reconnections after a loss
	// Resyncs counts re-sends of this replica's open bookings by trigger (connect: this
	// replica (re)connected; peer_join: a peer said hello); ResyncBookings the bookings they
	// carried; Joins the peers' hellos received.
	Resyncs        *prometheus.CounterVec
	ResyncBookings prometheus.Counter
	Joins          prometheus.Counter
}

// NewMetrics registers the bus metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "condisagg_bus_connected",
			Help: "1 while the shared-booking bus (NATS) is connected; 0 while this replica books only what it routes."}),
		Sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_bus_deltas_sent_total",
			Help: "Booking deltas and heartbeats published to the peers."}),
		Received: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_bus_deltas_received_total",
			Help: "Peers' booking deltas and heartbeats applied."}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_bus_deltas_dropped_total",
			Help: "Booking deltas not sent or not applied, by reason (disconnected, queue_full, publish_error, decode_error, unknown_model, slow_consumer, duplicate_replica, resync_limit)."},
			[]string{"reason"}),
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_bus_reconnects_total",
			Help: "Reconnections to the bus after a loss."}),
		Resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "condisagg_bus_resyncs_total",
			Help: "Re-sends of this replica's open bookings to the peers, by trigger (connect: this replica (re)connected; peer_join: a peer announced itself)."},
			[]string{"trigger"}),
		ResyncBookings: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_bus_resync_bookings_total",
			Help: "Open bookings re-sent to the peers by resyncs."}),
		Joins: prometheus.NewCounter(prometheus.CounterOpts{Name: "condisagg_bus_peer_joins_total",
			Help: "Peers' announcements (hello after their (re)connect) received; each asks for a resync."}),
	}
	reg.MustRegister(m.Connected, m.Sent, m.Received, m.Dropped, m.Reconnects, m.Resyncs, m.ResyncBookings, m.Joins)
	for _, r := range []string{"disconnected", "queue_full", "publish_error", "decode_error", "unknown_model", "slow_consumer", "duplicate_replica", "resync_limit"} {
		m.Dropped.WithLabelValues(r)
	}
	for _, t := range []string{"connect", "peer_join"} {
		m.Resyncs.WithLabelValues(t)
	}
	return m
}
