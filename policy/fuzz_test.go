package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseDisagg checks that the config parser never panics, that accepted configs are in
// range, and that an accepted config survives a round trip through its canonical JSON.
func FuzzParseDisagg(f *testing.F) {
	seeds, err := filepath.Glob("testdata/disagg_*.json")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDisagg(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if errs := d.validate(); len(errs) > 0 {
			t.Fatalf("accepted an invalid config %+v: %v", d, errs)
		}
		again, err := ParseDisagg([]byte(d.String()))
		if err != nil || again != d {
			t.Fatalf("round trip of %s: %+v, %v; want %+v", d.String(), again, err, d)
		}
	})
}

// FuzzDecide feeds Decide arbitrary pools, loads, overlaps, pins and thresholds (including
// values a correct caller never sends) and checks it never panics and always returns a
// self-consistent decision.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{3, 2, 1, 0, 16, 200, 7, 9, 1, 1, 0, 5})
	f.Add([]byte{1, 0, 0, 255, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(int8(b))
		}
		cfg := enabledConfig()
		cfg.Disagg.Policy = []Kind{ISLBounding, PrefillLoad, ISLOrLoad}[(next()+128)%3]
		cfg.Disagg.EffISLThreshold = int64(next()+128) * 16
		cfg.Disagg.EffISLRatioThreshold = float64(next()+128) / 255
		cfg.Disagg.PrefillBusyThreshold = Set(float64(next()+128) / 64)
		if v := next(); v > 0 {
			cfg.Disagg.DecodeBusyThreshold = Set(float64(v) / 64)
		}
		cfg.Selection.Temperature = float64(max(next(), 0)) / 32
		nd, np := (next()+128)%6, (next()+128)%6
		snap := &Snapshot{}
		in := &Input{Now: testNow, ISL: next() * 64}
		for i := range nd {
			snap.Decode = append(snap.Decode, WorkerLoad{ID: string(rune('a' + i)), KVCapacityBlocks: int64(next() * 100),
				ActivePrefillTokens: int64(next() * 50), ActiveDecodeBlocks: int64(next() * 20), NewBlocks: int64(next())})
			in.Decode = append(in.Decode, Signal{Worker: string(rune('a' + i)), GPU: next(), Host: next(), Disk: next(),
				Stream: Stream{Connected: next() >= 0, LastStored: testNow, RoutedSinceStored: next()}})
		}
		for i := range np {
			snap.Prefill = append(snap.Prefill, WorkerLoad{ID: string(rune('p' + i)), MaxBatchedTokens: int64(next() * 100),
				ActivePrefillTokens: int64(next() * 100)})
		}
		if next() > 100 {
			in.Decode = in.Decode[:len(in.Decode)/2]
		}
		if v := next(); v > 90 {
			in.Pin.Decode = "b"
		} else if v < -90 {
			in.Pin.Prefill = "q"
		}
		dec := Decide(&cfg, in, snap, newRand(uint64(len(data))))
		if dec.Reason.Route() != dec.Route {
			t.Fatalf("reason %v on route %v", dec.Reason, dec.Route)
		}
		if dec.Decode >= len(snap.Decode) || dec.Prefill >= len(snap.Prefill) {
			t.Fatalf("index out of range: %d/%d, %d/%d", dec.Decode, len(snap.Decode), dec.Prefill, len(snap.Prefill))
		}
		if dec.Decode >= 0 && dec.DecodeID != snap.Decode[dec.Decode].ID || dec.Prefill >= 0 && dec.PrefillID != snap.Prefill[dec.Prefill].ID {
			t.Fatalf("IDs do not match indices: %+v", dec)
		}
		if !dec.Routable() && dec.Inputs.Err == nil && dec.Reason != ReasonNoPrefillWorkers {
			t.Fatalf("unroutable decision without an error: %+v", dec)
		}
		if dec.PrefillTokens < 0 || dec.PrefillTokens > int64(max(in.ISL, 0)) {
			t.Fatalf("prefill tokens %d outside [0, ISL=%d]", dec.PrefillTokens, in.ISL)
		}
		if dec.Route == RouteDecode && dec.Reason != ReasonNoPrefillWorkers && dec.Guard != cfg.Guard() {
			t.Fatalf("bypass without the configured guard: %+v", dec.Guard)
		}
	})
}
