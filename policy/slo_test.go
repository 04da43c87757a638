package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/cost"
)

func sloConfig(t *testing.T, extra string) Config {
	t.Helper()
	c := enabledConfig()
	d, err := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100"` + extra + `}`))
	if err != nil {
		t.Fatal(err)
	}
	c.Disagg = d
	mustValid(t, c)
	return c
}

// TestSLOConfig: the slo keys parse, default and fail with the field's name and the fix.
func TestSLOConfig(t *testing.T) {
	c := sloConfig(t, `,"slo_ttft_ms":500,"slo_tpot_ms":30.5`)
	if c.Disagg.SLO != (SLO{TTFT: 500 * time.Millisecond, TPOT: 30500 * time.Microsecond}) || c.Disagg.Cost.A1 == 0 {
		t.Fatalf("parsed %+v", c.Disagg)
	}
	if got := c.Disagg.String(); !strings.Contains(got, `"slo_ttft_ms":500,"slo_tpot_ms":30.5,"cost_model":"llama3.1-8b-h100","slo_feedback":false,"slo_feedback_max":8,"slo_margin":0.15`) {
		t.Fatalf("String() = %s", got)
	}
	if d := sloConfig(t, ``).Disagg.SLO; d.TTFT != DefaultSLOTTFT || d.TPOT != DefaultSLOTPOT {
		t.Fatalf("defaults %+v", d)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"policy":"slo"}`, `cost_model: "" is required with policy "slo": one of llama3.1-8b-h100`},
		{`{"policy":"slo","cost_model":"gpt"}`, `cost_model: "gpt" must be one of llama3.1-8b-h100`},
		{`{"policy":"slo","cost_model":3}`, `cost_model: 3 must be a string`},
		{`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_ttft_ms":0}`, `slo_ttft_ms: 0 must be a number of milliseconds in (0, 3600000]`},
		{`{"policy":"slo","cost_model":"llama3.1-8b-h100","slo_tpot_ms":"fast"}`, `slo_tpot_ms: "fast" must be a number`},
	} {
		c := enabledConfig()
		d, err := ParseDisagg([]byte(tc.json))
		if err == nil {
			c.Disagg = d
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.json, err, tc.want)
		}
		var ce *ConfigError
		if err != nil && !errors.As(err, &ce) {
			t.Errorf("%s: %T is not a *ConfigError", tc.json, err)
		}
	}
}

// sloFleet is two decode and two prefill workers with 8192-token budgets and room for 30k
// blocks each; load edits them.
func sloFleet(load func(d, p []WorkerLoad)) *Snapshot {
	s := &Snapshot{Version: 1}
	for _, id := range []string{"d0", "d1"} {
		s.Decode = append(s.Decode, WorkerLoad{ID: id, MaxBatchedTokens: 8192, KVCapacityBlocks: 30000})
	}
	for _, id := range []string{"p0", "p1"} {
		s.Prefill = append(s.Prefill, WorkerLoad{ID: id, MaxBatchedTokens: 8192, KVCapacityBlocks: 30000})
	}
	if load != nil {
		load(s.Decode, s.Prefill)
	}
	return s
}

func sloInput(s *Snapshot, isl int, decodeGPU ...int) *Input {
	in := &Input{Now: testNow, ISL: isl}
	for i, w := range s.Decode {
		g := 0
		if i < len(decodeGPU) {
			g = decodeGPU[i]
		}
		in.Decode = append(in.Decode, Signal{Worker: w.ID, GPU: g, Stream: live()})
		s.Decode[i].NewBlocks = int64((isl+15)/16 - g)
	}
	for i, w := range s.Prefill {
		in.Prefill = append(in.Prefill, Signal{Worker: w.ID, Stream: live()})
		s.Prefill[i].NewBlocks = int64((isl + 15) / 16) // as pool.Snapshot sets it
	}
	return in
}

// TestSLOPlacements: the forecast picks the placement the cost model says keeps the most SLO
// headroom, in the regimes that matter, and records the three forecasts (in these cases the
// aggregated choice of TestSLOSatisfice agrees with it).
func TestSLOPlacements(t *testing.T) {
	heavyDecode := func(d []WorkerLoad) { // 200 sequences of 4k context each
		for i := range d {
			d[i].DecodeRequests, d[i].ActiveDecodeBlocks = 200, 200*256
			d[i].KVCapacityBlocks = 60000
		}
	}
	tests := []struct {
		name   string
		isl    int
		gpu    []int
		load   func(d, p []WorkerLoad)
		want   Route
		reason Reason
		worker string
	}{
		// An idle fleet: prefilling where the decode runs saves the transfer.
		{"idle_fleet_bypass", 8000, nil, nil, RouteDecode, ReasonSLOBypass, "d0"},
		// The prompt is cached on d1: its short local prefill wins.
		{"warm_decode_worker_bypass", 8000, []int{0, 480}, nil, RouteDecode, ReasonSLOBypass, "d1"},
		// Decode workers full of running sequences: a local 8k prefill would stall 200 decodes
		// past the TPOT objective. The prefill pool is busy too (a decode there would share
		// steps with full prefill chunks), so prefill there and decode here.
		{"busy_decodes_remote", 8000, nil, func(d, p []WorkerLoad) {
			heavyDecode(d)
			p[0].ActivePrefillTokens, p[1].ActivePrefillTokens = 16000, 24000
		}, RoutePrefill, ReasonSLORemote, "p0"},
		// The same decode pool with an idle prefill pool: the whole request on a prefill worker
		// meets both objectives with the most room (the aggregated behaviour of a split fleet).
		{"busy_decodes_idle_prefill_local", 8000, nil, func(d, p []WorkerLoad) { heavyDecode(d) }, RoutePrefillLocal, ReasonSLOPrefillLocal, "p0"},
		// No decode worker has KV room: the whole request runs on the idler prefill worker.
		{"decode_pool_full_prefill_local", 8000, nil, func(d, p []WorkerLoad) {
			for i := range d {
				d[i].ActiveDecodeBlocks = 29990
			}
			p[0].ActivePrefillTokens = 20000
		}, RoutePrefillLocal, ReasonSLOPrefillLocal, "p1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sloConfig(t, ``)
			s := sloFleet(tc.load)
			in := sloInput(s, tc.isl, tc.gpu...)
			dec := Decide(&cfg, in, s, newRand(1))
			if dec.Route != tc.want || dec.Reason != tc.reason || !dec.Routable() {
				t.Fatalf("route %v reason %v (estimates %+v)", dec.Route, dec.Reason, dec.Inputs.Estimates)
			}
			got := dec.DecodeID
			if tc.want != RouteDecode {
				got = dec.PrefillID
			}
			if got != tc.worker {
				t.Fatalf("worker %s, want %s (estimates %+v)", got, tc.worker, dec.Inputs.Estimates)
			}
			est := dec.Inputs.Estimates[tc.want]
			if !est.Valid || est.TTFTms <= 0 || est.TPOTms <= 0 {
				t.Fatalf("chosen estimate %+v", est)
			}
			for r, e := range dec.Inputs.Estimates {
				if e.Valid && e.Headroom > est.Headroom {
					t.Fatalf("%v forecast headroom %.3f over the chosen %.3f", Route(r), e.Headroom, est.Headroom)
				}
			}
			if tc.want == RoutePrefillLocal && (dec.Decode != -1 || dec.PrefillTokens != int64(tc.isl)) {
				t.Fatalf("prefill_local decision decode=%d prefill tokens %d", dec.Decode, dec.PrefillTokens)
			}
		})
	}
}

// TestSLOSatisfice: while the best placement keeps a 20% margin (slo_margin) under the objective, the slo
// policy stops maximising headroom and runs the request whole where aggregated selection
// would (here the decode worker holding its prefix, though remote prefill forecasts more
// headroom); when no local placement keeps the margin, the most headroom wins again.
func TestSLOSatisfice(t *testing.T) {
	load := func(d, p []WorkerLoad) {
		for i := range d {
			d[i].DecodeRequests, d[i].ActiveDecodeBlocks = 40, 40*256
		}
		for i := range p {
			p[i].ActiveDecodeBlocks = 29900 // no KV room for a whole request
		}
	}
	cfg := sloConfig(t, ``)
	s := sloFleet(load)
	in := sloInput(s, 8000, 0, 480)
	dec := Decide(&cfg, in, s, newRand(1))
	est := dec.Inputs.Estimates
	if dec.Route != RouteDecode || dec.Reason != ReasonSLOBypass || dec.DecodeID != "d1" {
		t.Fatalf("route %v reason %v decode %q, want slo_bypass on d1 (estimates %+v)", dec.Route, dec.Reason, dec.DecodeID, est)
	}
	if !(est[RoutePrefill].Headroom > est[RouteDecode].Headroom && est[RouteDecode].Headroom >= DefaultSLOMargin) {
		t.Fatalf("want remote to forecast more headroom than the chosen bypass, which keeps the margin: %+v", est)
	}
	// slo_margin 1 never satisfices (no forecast keeps all of the objective as headroom): the
	// most headroom wins, which is the remote prefill.
	cfg = sloConfig(t, `,"slo_margin":1`)
	s = sloFleet(load)
	in = sloInput(s, 8000, 0, 480)
	if dec := Decide(&cfg, in, s, newRand(1)); dec.Route != RoutePrefill || dec.Reason != ReasonSLORemote {
		t.Fatalf("slo_margin 1: route %v reason %v, want the remote prefill with the most headroom (estimates %+v)",
			dec.Route, dec.Reason, dec.Inputs.Estimates)
	}
	// A margin just below the bypass's headroom still satisfices on d1; one just above does not.
	h := est[RouteDecode].Headroom
	for _, c := range []struct {
		margin float64
		want   Route
	}{{h - 0.01, RouteDecode}, {min(h+0.01, 1), RoutePrefill}} {
		cfg = sloConfig(t, fmt.Sprintf(`,"slo_margin":%g`, c.margin))
		s = sloFleet(load)
		in = sloInput(s, 8000, 0, 480)
		if dec := Decide(&cfg, in, s, newRand(1)); dec.Route != c.want {
			t.Fatalf("slo_margin %g (bypass headroom %g): route %v, want %v", c.margin, h, dec.Route, c.want)
		}
	}
	// A 25 ms TPOT objective with a 0.2 margin: a local prefill on d1 would slow its 40 decodes
	// past the margin (its headroom is 0.10) and the prefill workers have no KV room, so the
	// remote prefill with the most headroom wins.
	cfg = sloConfig(t, `,"slo_tpot_ms":25,"slo_margin":0.2`)
	s = sloFleet(load)
	in = sloInput(s, 8000, 0, 480)
	dec = Decide(&cfg, in, s, newRand(1))
	if dec.Route != RoutePrefill || dec.Reason != ReasonSLORemote {
		t.Fatalf("25 ms TPOT: route %v reason %v (estimates %+v)", dec.Route, dec.Reason, dec.Inputs.Estimates)
	}
}

// TestSLOOverload: when no placement is forecast to meet the objective, the whole request goes
// to the worker of either pool with the lowest aggregated selection cost (cache credit first),
// under its own reason; the decode-busy guard still bars a worker above θd.
func TestSLOOverload(t *testing.T) {
	impossible := SLO{TTFT: time.Millisecond, TPOT: time.Millisecond}
	busy := func(l *WorkerLoad) { l.ActivePrefillTokens, l.DecodeRequests, l.ActiveDecodeBlocks = 20000, 50, 5000 }
	tests := []struct {
		name       string
		guard      string
		load       func(d, p []WorkerLoad)
		decodeGPU  []int
		prefillGPU []int
		want       Route
		reason     Reason
		worker     string
		tokens     int64 // prefill_local: uncached tokens the prefill worker computes
	}{
		// The prompt is cached on p1 and every decode worker is busy: p1 runs it whole.
		{"cached_prefill_worker", ``, func(d, p []WorkerLoad) { busy(&d[0]); busy(&d[1]); busy(&p[0]) }, nil, []int{0, 480},
			RoutePrefillLocal, ReasonSLOOverloadPrefillLocal, "p1", 8000 - 480*16},
		// The prompt is cached on d1 and the prefill pool is queued deep: d1 prefills locally.
		{"cached_decode_worker", ``, func(d, p []WorkerLoad) { busy(&p[0]); busy(&p[1]); busy(&d[0]) }, []int{0, 480}, nil,
			RouteDecode, ReasonSLOOverloadBypass, "d1", 0},
		// Nothing cached anywhere: the least loaded of all four (p0, the only idle one).
		{"least_loaded_of_both_pools", ``, func(d, p []WorkerLoad) { busy(&d[0]); busy(&d[1]); busy(&p[1]) }, nil, nil,
			RoutePrefillLocal, ReasonSLOOverloadPrefillLocal, "p0", 8000},
		// Every worker is past θd = 0.1 (3,000 of 30,000 blocks): no candidate, the old
		// fallback (remote, decode target by load) stands.
		{"guard_bars_every_worker", `,"decode_busy_threshold":0.1`, func(d, p []WorkerLoad) {
			for _, l := range []*WorkerLoad{&d[0], &d[1], &p[0], &p[1]} {
				l.ActiveDecodeBlocks = 5000
			}
		}, nil, nil, RoutePrefill, ReasonRemoteDecodeRejected, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sloConfig(t, tc.guard)
			s := sloFleet(tc.load)
			in := sloInput(s, 8000, tc.decodeGPU...)
			for i, g := range tc.prefillGPU {
				in.Prefill[i].GPU = g
				s.Prefill[i].NewBlocks = int64(500 - g)
			}
			for i := range s.Prefill {
				if i >= len(tc.prefillGPU) {
					s.Prefill[i].NewBlocks = 500
				}
			}
			in.SLO = impossible
			dec := Decide(&cfg, in, s, newRand(1))
			if dec.Route != tc.want || dec.Reason != tc.reason {
				t.Fatalf("route %v reason %v, want %v %v (estimates %+v)", dec.Route, dec.Reason, tc.want, tc.reason, dec.Inputs.Estimates)
			}
			for r, e := range dec.Inputs.Estimates {
				if e.Valid && e.Headroom >= 0 {
					t.Fatalf("%v forecast headroom %.3f under an impossible objective", Route(r), e.Headroom)
				}
			}
			switch tc.want {
			case RoutePrefillLocal:
				if dec.PrefillID != tc.worker || dec.Decode != -1 || dec.PrefillTokens != tc.tokens {
					t.Fatalf("prefill %q decode %d prefill tokens %d, want %s, -1, %d", dec.PrefillID, dec.Decode, dec.PrefillTokens, tc.worker, tc.tokens)
				}
			case RouteDecode:
				if dec.DecodeID != tc.worker || !dec.Routable() {
					t.Fatalf("decode %q, want %s", dec.DecodeID, tc.worker)
				}
			}
		})
	}
}

// TestSLOPerRequestObjective: a request's own tighter TPOT objective changes the choice the
// configured one makes (from the aggregated choice under a loose objective to the remote
// prefill that protects TPOT), and is what Inputs records.
func TestSLOPerRequestObjective(t *testing.T) {
	cfg := sloConfig(t, `,"slo_tpot_ms":1000`)
	s := sloFleet(func(d, p []WorkerLoad) {
		for i := range d {
			d[i].DecodeRequests, d[i].ActiveDecodeBlocks, d[i].KVCapacityBlocks = 200, 200*256, 60000
		}
		p[0].ActivePrefillTokens, p[1].ActivePrefillTokens = 16000, 16000
	})
	in := sloInput(s, 8000)
	// A 1 s TPOT leaves every local placement room: the whole request goes where aggregated
	// selection puts it, a prefill worker (queued prefill) rather than a decode worker holding
	// 200 sequences.
	if dec := Decide(&cfg, in, s, newRand(1)); dec.Route != RoutePrefillLocal || dec.Reason != ReasonSLOPrefillLocal {
		t.Fatalf("a 1 s TPOT objective: route %v reason %v, want prefill_local by aggregated cost", dec.Route, dec.Reason)
	}
	in.SLO = SLO{TPOT: 60 * time.Millisecond}
	dec := Decide(&cfg, in, s, newRand(1))
	if dec.Route != RoutePrefill || dec.Inputs.SLO.TPOT != 60*time.Millisecond || dec.Inputs.SLO.TTFT != DefaultSLOTTFT {
		t.Fatalf("a 60 ms TPOT objective: route %v, objective %+v", dec.Route, dec.Inputs.SLO)
	}
}

// TestSLODecodePin: a trusted decode pin keeps the slo policy to that worker (no
// prefill_local, whose decode would run elsewhere).
func TestSLODecodePin(t *testing.T) {
	cfg := sloConfig(t, ``)
	s := sloFleet(func(d, p []WorkerLoad) {
		for i := range d {
			d[i].ActiveDecodeBlocks = 29990
		}
	})
	in := sloInput(s, 8000)
	in.Pin.Decode = "d1"
	dec := Decide(&cfg, in, s, newRand(1))
	if dec.Route == RoutePrefillLocal || dec.DecodeID != "d1" {
		t.Fatalf("pinned to d1: route %v decode %q", dec.Route, dec.DecodeID)
	}
}

// TestSLOFeedbackCorrections: a correction that says local prefills take 10x the forecast
// moves an idle fleet's choice off the bypass with slo_feedback true; slo_feedback false (the
// default) ignores it; bad values of the two keys are refused with their names.
func TestSLOFeedbackCorrections(t *testing.T) {
	s := sloFleet(nil)
	in := sloInput(s, 8000)
	in.Feedback[RouteDecode] = Correction{TTFT: 10}
	cfg := sloConfig(t, `,"slo_feedback":true`)
	dec := Decide(&cfg, in, s, newRand(1))
	if dec.Route == RouteDecode || dec.Inputs.Estimates[RouteDecode].TTFTFactor != 10 || dec.Inputs.Estimates[RoutePrefill].TTFTFactor != 1 {
		t.Fatalf("with a 10x local TTFT correction: route %v, estimates %+v", dec.Route, dec.Inputs.Estimates)
	}
	off := sloConfig(t, ``)
	if dec := Decide(&off, in, s, newRand(1)); dec.Route != RouteDecode || dec.Inputs.Estimates[RouteDecode].TTFTFactor != 1 {
		t.Fatalf("feedback off: route %v factor %v", dec.Route, dec.Inputs.Estimates[RouteDecode].TTFTFactor)
	}
	for _, tc := range []struct{ extra, want string }{
		{`,"slo_feedback":"yes"`, `slo_feedback: "yes" must be true or false`},
		{`,"slo_feedback_max":0.5`, `slo_feedback_max: 0.5 must be in [1, 100]`},
		{`,"slo_margin":1.5`, `slo_margin: 1.5 must be in [0, 1]`},
		{`,"slo_margin":"wide"`, `slo_margin: "wide" must be a number in [0, 1]`},
		{`,"slo_feedback_max":"x"`, `slo_feedback_max: "x" must be a number`},
	} {
		c := enabledConfig()
		d, err := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100"` + tc.extra + `}`))
		if err == nil {
			c.Disagg = d
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.extra, err, tc.want)
		}
	}
}

// TestSLOCorrectionNeverOverloads: a request the cost model forecasts to meet its objective is
// not given up to the overload rule because a correction says every placement would miss:
// it takes the placement with the most corrected headroom under its forecast reason. With the
// uncorrected forecasts missing too, the overload rule applies as before.
func TestSLOCorrectionNeverOverloads(t *testing.T) {
	cfg := sloConfig(t, `,"slo_feedback":true`)
	s := sloFleet(nil)
	in := sloInput(s, 8000)
	raw := Decide(&cfg, in, s, newRand(1)).Inputs.Estimates
	ttft := 0.0
	for _, e := range raw {
		if e.Valid {
			ttft = max(ttft, e.TTFTms)
		}
	}
	// Every placement meets the objective uncorrected (TTFT at 1.5x the slowest forecast),
	// none with its TTFT forecast 8x.
	in.SLO = SLO{TTFT: time.Duration(1.5 * ttft * float64(time.Millisecond)), TPOT: time.Second}
	for r := range in.Feedback {
		in.Feedback[r] = Correction{TTFT: 8}
	}
	dec := Decide(&cfg, in, s, newRand(1))
	est := dec.Inputs.Estimates
	best := RouteDecode
	for _, r := range []Route{RoutePrefill, RoutePrefillLocal} {
		if est[r].Valid && est[r].Headroom > est[best].Headroom {
			best = r
		}
	}
	if dec.Reason == ReasonSLOOverloadBypass || dec.Reason == ReasonSLOOverloadPrefillLocal || dec.Route != best || est[best].Headroom >= 0 {
		t.Fatalf("raw forecasts meet the objective, corrected ones miss: route %v reason %v, want %v by its forecast (estimates %+v)",
			dec.Route, dec.Reason, best, est)
	}
	// Uncorrected forecasts that miss too: the overload rule.
	in.SLO = SLO{TTFT: time.Millisecond, TPOT: time.Millisecond}
	if dec := Decide(&cfg, in, s, newRand(1)); dec.Reason != ReasonSLOOverloadBypass && dec.Reason != ReasonSLOOverloadPrefillLocal {
		t.Fatalf("every forecast misses uncorrected: reason %v, want an overload placement", dec.Reason)
	}
}

// TestReportedBusySource: decode_busy_source "reported" applies θd to the previewed worker's
// own KV usage: a bypass over it is denied (remote_decode_busy), unknown usage denies
// (remote_capacity_unknown), under it passes; a bad source is refused by name; the canonical
// string names the source only when it is not Dynamo's default.
func TestReportedBusySource(t *testing.T) {
	for _, tc := range []struct {
		usage float64
		want  Reason
	}{{0.95, ReasonRemoteDecodeBusy}, {-1, ReasonRemoteCapacityUnknown}, {0.5, ReasonBypassISL}} {
		cfg := enabledConfig()
		d, err := ParseDisagg([]byte(`{"decode_busy_threshold":0.8,"decode_busy_source":"reported"}`))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Disagg = d
		mustValid(t, cfg)
		snap := oneEach(WorkerLoad{KVCapacityBlocks: 40000, ReportedKVUsage: tc.usage}, WorkerLoad{MaxBatchedTokens: 8192})
		in := &Input{Now: testNow, ISL: 1024,
			Decode: []Signal{{Worker: "d0", GPU: 60, Stream: live()}}, Prefill: []Signal{{Worker: "p0", Stream: live()}}}
		if dec := Decide(&cfg, in, snap, newRand(1)); dec.Reason != tc.want {
			t.Errorf("usage %v: reason %v, want %v", tc.usage, dec.Reason, tc.want)
		}
		if !strings.Contains(cfg.Disagg.String(), `"decode_busy_source":"reported"`) {
			t.Errorf("String() = %s", cfg.Disagg.String())
		}
	}
	if _, err := ParseDisagg([]byte(`{"decode_busy_source":"scraped"}`)); err == nil || !strings.Contains(err.Error(), `decode_busy_source: "scraped" must be "booked" or "reported"`) {
		t.Fatalf("bad source: %v", err)
	}
	if s := DefaultDisagg().String(); strings.Contains(s, "decode_busy_source") {
		t.Fatalf("the default string changed: %s", s)
	}
}

// TestUseCostModelFile: a model file's model (read by the shell) becomes the slo policy's cost
// model, String names the file, a policy object with its own cost_model refuses it, and a
// policy other than slo warns that it does not read it.
func TestUseCostModelFile(t *testing.T) {
	m := cost.Model{Name: "cpu", T0: 10, A1: 0.3, D1: 0.2, NumGPUBlocks: 100}
	d, err := ParseDisagg([]byte(`{"policy":"slo"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.UseCostModelFile("/models/cpu.yaml", m); err != nil {
		t.Fatal(err)
	}
	c := enabledConfig()
	c.Disagg = d
	if err := c.Validate(); err != nil {
		t.Fatalf("slo with a model file: %v", err)
	}
	if c.Disagg.Cost != m || c.Disagg.CostModelSource() != "file /models/cpu.yaml" ||
		!strings.Contains(c.Disagg.String(), `"cost_model_file":"/models/cpu.yaml"`) || strings.Contains(c.Disagg.String(), `"cost_model":`) {
		t.Fatalf("disagg %+v, string %s", c.Disagg, c.Disagg.String())
	}
	named, _ := ParseDisagg([]byte(`{"policy":"slo","cost_model":"llama3.1-8b-h100"}`))
	if named.CostModelSource() != "named llama3.1-8b-h100" {
		t.Fatalf("source %q", named.CostModelSource())
	}
	if err := named.UseCostModelFile("/models/cpu.yaml", m); !errors.Is(err, ErrCostModelTwice) || named.Cost.Name != "llama3.1-8b-h100" {
		t.Fatalf("both given: %v, cost %q", err, named.Cost.Name)
	}
	isl := DefaultDisagg()
	_ = isl.UseCostModelFile("/models/cpu.yaml", m)
	c.Disagg = isl
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, `cost_model_file "/models/cpu.yaml": only the slo policy reads it; policy is isl_bounding`) {
		t.Fatalf("warnings %q", w)
	}
}
