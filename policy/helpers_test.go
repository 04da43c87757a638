package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// enabledConfig is the default configuration with the feature on and its preconditions met.
func enabledConfig() Config {
	c := DefaultConfig()
	c.Enabled, c.DisaggGiven, c.KVEvents, c.DistinctPools = true, true, true, true
	return c
}

func live() Stream { return Stream{Connected: true, LastStored: testNow} }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// outcome is the part of a Decision the table tests compare whole.
type outcome struct {
	Route     Route
	Reason    Reason
	Gate      Gate
	Decode    string
	Prefill   string
	Eff       int
	Busy      Busy
	Previewed bool
	Silent    bool
}

func outcomeOf(d Decision) outcome {
	return outcome{Route: d.Route, Reason: d.Reason, Gate: d.Gate, Decode: d.DecodeID, Prefill: d.PrefillID,
		Eff: d.Inputs.Eff, Busy: d.Inputs.PrefillBusy, Previewed: d.Inputs.PrefillPreviewed, Silent: d.Inputs.Silent}
}

func mustValid(t *testing.T, c Config) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("config invalid: %v", err)
	}
}

// oneEach is a snapshot with decode worker d0 and prefill worker p0.
func oneEach(d, p WorkerLoad) *Snapshot {
	d.ID, p.ID = "d0", "p0"
	return &Snapshot{Version: 1, Decode: []WorkerLoad{d}, Prefill: []WorkerLoad{p}}
}
