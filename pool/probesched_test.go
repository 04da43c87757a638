package pool

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestProbeScheduleOnInjectedClock drives the probe schedule as pool/probe does, with no
// goroutine and no timer: DueProbes on the fixture's clock, outcomes through ProbeDone. A slot
// limit leaves a due worker for the next call; a refused worker is excluded at its second
// probe (H1) and then probed after backoffs doubling from 1 s (H3); a requested probe wakes
// the shell and comes a quarter interval after the last one.
func TestProbeScheduleOnInjectedClock(t *testing.T) {
	f := newFixture(t, basic())
	f.p.BeginProbing()
	defer f.p.EndProbing()
	<-f.p.ProbeKick()      // New's workers are to be probed at once
	var d0 []time.Duration // when d0 was probed, from t0
	due := func(free int) ([]string, time.Duration) {
		t.Helper()
		ts, wait := f.p.DueProbes(free)
		var ids []string
		for _, pt := range ts {
			ids = append(ids, pt.ID)
			if pt.ID != "d0" {
				f.p.ProbeDone(pt, ProbeOK, nil)
				continue
			}
			d0 = append(d0, f.clock.Now().Sub(t0))
			f.p.ProbeDone(pt, ProbeRefused, errors.New("connection refused"))
		}
		return ids, wait
	}
	if got, _ := due(1); !slices.Equal(got, []string{"d0"}) {
		t.Fatalf("first round with one free slot = %v, want d0 alone", got)
	}
	if got, wait := due(8); !slices.Equal(got, []string{"p0"}) || wait != DefaultHealthInterval {
		t.Fatalf("second call = %v wait %v, want p0 left over and a full interval", got, wait)
	}
	for f.clock.Now().Sub(t0) < 8*time.Second {
		_, wait := due(8)
		f.clock.Advance(wait)
	}
	due(8)
	want := []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	if !slices.Equal(d0, want) {
		t.Fatalf("d0 probed at %v, want %v (H1, H3)", d0, want)
	}
	if w := f.info(t, "d0"); w.Healthy || w.HealthReason != ReasonProbeRefused || !w.HealthSince.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("d0 = healthy %v reason %s since %v, want excluded at the second probe (H1)", w.Healthy, w.HealthReason, w.HealthSince.Sub(t0))
	}
	if err := f.p.RequestProbe("p0"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.p.ProbeKick():
	default:
		t.Fatal("RequestProbe did not wake the shell")
	}
	// p0 was probed at 8 s, just now: the requested probe waits a quarter interval.
	if got, wait := due(8); len(got) != 0 || wait != DefaultHealthInterval/4 {
		t.Fatalf("after RequestProbe: %v due, wait %v; want none for %v", got, wait, DefaultHealthInterval/4)
	}
	f.clock.Advance(DefaultHealthInterval / 4)
	if got, _ := due(8); !slices.Equal(got, []string{"p0"}) {
		t.Fatalf("a quarter interval after RequestProbe: %v, want p0", got)
	}
}
