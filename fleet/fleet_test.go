package fleet

import (
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// Steady arrivals give their rates once the window is full, by pool, and only what fell in
// the window counts.
func TestRatesOverWindow(t *testing.T) {
	e := New(10 * time.Second)
	// 20 s at 10 placements/s: 4 on the decode pool, 6 on the prefill pool per second.
	for i := range 200 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if i%10 < 4 {
			e.Booked(now, Decode, 100, 50) // 100 uncached after 50 cached
		} else {
			e.Booked(now, Prefill, 1000, 0)
			e.Output(now, Decode, 200)
		}
	}
	// At 19.95 s the newest bucket (31, from 19.375 s) is partly elapsed: the ring covers
	// [10 s, 19.95 s), 9.95 s holding 100 placements (10.0 s to 19.9 s).
	now := t0.Add(19950 * time.Millisecond)
	v := e.View(now, 0, 0)
	near(t, "window", v.Window.Seconds(), 9.95)
	sec := 9.95
	near(t, "decode requests/s", v.Decode.Requests, 40/sec)
	near(t, "prefill requests/s", v.Prefill.Requests, 60/sec)
	near(t, "decode tokens/s", v.Decode.PrefillTokens, 40*100/sec)
	near(t, "prefill tokens/s", v.Prefill.PrefillTokens, 60*1000/sec)
	near(t, "decode pairs/s", v.Decode.PrefillPairs, 40*100*(50+50)/sec)
	near(t, "prefill pairs/s", v.Prefill.PrefillPairs, 60*1000*500/sec)
	near(t, "decode output/s", v.Decode.OutputTokens, 60*200/sec)
	near(t, "prefill output/s", v.Prefill.OutputTokens, 0)
}

// After a silence longer than the window every rate is back to 0, and the ring is cleared in
// a bounded number of steps (a gap of hours costs what a gap of one window does).
func TestForgetsAfterWindow(t *testing.T) {
	e := New(10 * time.Second)
	for i := range 100 {
		e.Booked(t0.Add(time.Duration(i)*100*time.Millisecond), Prefill, 500, 0)
	}
	if v := e.View(t0.Add(10*time.Second), 0, 0); v.Prefill.Requests == 0 {
		t.Fatal("no rate inside the window")
	}
	v := e.View(t0.Add(5*time.Hour), 0, 0)
	if v.Prefill.Requests != 0 || v.Prefill.PrefillTokens != 0 || v.Prefill.PrefillPairs != 0 {
		t.Fatalf("rates after 5 h of silence: %+v", v.Prefill)
	}
	e.Booked(t0.Add(5*time.Hour), Decode, 10, 0)
	v = e.View(t0.Add(5*time.Hour+time.Second), 0, 0)
	// The ring then spans buckets 28786..28801: from 17,991.25 s to 18,001 s.
	near(t, "window after the gap", v.Window.Seconds(), 9.75)
	near(t, "decode requests/s after the gap", v.Decode.Requests, 1/9.75)
}

// The first second gives no view: a handful of requests is no rate.
func TestNoViewBeforeOneSecond(t *testing.T) {
	e := New(0)
	if e.Window() != DefaultWindow {
		t.Fatalf("window %v, want %v", e.Window(), DefaultWindow)
	}
	e.Booked(t0, Decode, 100, 0)
	if v := e.View(t0.Add(900*time.Millisecond), 0, 0); v.Window != 0 {
		t.Fatalf("view after 0.9 s: %+v", v)
	}
	if v := e.View(t0.Add(1100*time.Millisecond), 0, 0); v.Window == 0 || v.Decode.Requests == 0 {
		t.Fatalf("no view after 1.1 s: %+v", v)
	}
}

// Queue growth is the change of the booked queue since the oldest sample in the window.
func TestQueueGrowth(t *testing.T) {
	e := New(10 * time.Second)
	for i := range 30 {
		// The prefill queue grows by 1,000 tokens/s; the decode queue drains by 100/s.
		e.View(t0.Add(time.Duration(i)*time.Second), int64(5000-100*i), int64(1000*i))
	}
	v := e.View(t0.Add(30*time.Second), 2000, 30000)
	near(t, "prefill queue growth", math.Round(v.Prefill.QueueGrowth), 1000)
	near(t, "decode queue growth", math.Round(v.Decode.QueueGrowth), -100)
}

// A clock that steps back counts into the newest bucket instead of corrupting the ring.
func TestClockBack(t *testing.T) {
	e := New(10 * time.Second)
	e.Booked(t0.Add(5*time.Second), Prefill, 100, 0)
	e.Booked(t0, Prefill, 100, 0) // the first observation fixed the epoch at 5 s
	e.Booked(t0.Add(3*time.Second), Prefill, 100, 0)
	v := e.View(t0.Add(7*time.Second), 0, 0)
	near(t, "prefill requests/s", v.Prefill.Requests, 3/2.0)
}

func TestConcurrent(t *testing.T) {
	e := New(time.Second)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				e.Booked(now, Pool(g%2), 10, 0)
				e.Output(now, Pool(g%2), 5)
				e.View(now, 0, 0)
			}
		}()
	}
	wg.Wait()
	v := e.View(t0.Add(999*time.Millisecond), 0, 0)
	if v.Decode.Requests <= 0 || v.Prefill.Requests <= 0 {
		t.Fatalf("rates %+v", v)
	}
}

func BenchmarkBookedView(b *testing.B) {
	e := New(DefaultWindow)
	b.ReportAllocs()
	for i := range b.N {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		e.View(now, 100, 200)
		e.Booked(now, Pool(i%2), 500, 100)
	}
}
