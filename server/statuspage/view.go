package statuspage

import (
	"time"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
)

// The JSON of the status page. Each object may gain fields; clients ignore what they do not
// know. Absent data is null, never a made-up zero (a worker never scraped has "scraped": null).

// State is /ui/api/state.
type State struct {
	Now    time.Time `json:"now"`
	Ready  bool      `json:"ready"`
	Policy string    `json:"policy"`
	// CostModel is the slo policy's cost model and where it came from (null for the other
	// policies).
	CostModel *costModelJSON `json:"cost_model"`
	Models    []modelJSON    `json:"models"`
	Decisions decisionsJSON  `json:"decisions"`
	Mix       mixJSON        `json:"mix"`
	// Shadow is the candidate config's agreement with the live one (null without a candidate).
	Shadow *shadowJSON `json:"shadow"`
	// Transfers are the latest remote-prefill requests whose decode answer was classified
	// (docs/disagg-truth.md), newest first.
	Transfers []transferJSON `json:"transfers"`
}

// costModelJSON names the slo policy's cost model: Name is the model's (a calibration's name,
// or the name inside the model file), File the model file it was read from ("" for a named
// calibration).
type costModelJSON struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
}

// costModelView is d's cost model for the page (nil unless the policy is slo).
func costModelView(d policy.Disagg) *costModelJSON {
	if d.Policy != policy.SLOKind {
		return nil
	}
	return &costModelJSON{Name: d.Cost.Name, File: d.CostModelFile}
}

// transferJSON is one classified remote-prefill request (extproc.TransferRecord).
type transferJSON struct {
	At           time.Time `json:"at"`
	RequestID    string    `json:"request_id"`
	Prefill      string    `json:"prefill"`
	Decode       string    `json:"decode"`
	Outcome      string    `json:"outcome"` // transferred, recomputed, unknown
	PromptTokens int64     `json:"prompt_tokens"`
	CachedTokens *int64    `json:"cached_tokens"` // null: not reported
}

type modelJSON struct {
	Name         string   `json:"name"` // "" : the one model, which takes every name
	BlockSize    int      `json:"block_size"`
	LoRAAdapters []string `json:"lora_adapters,omitempty"`
	Workers      []Worker `json:"workers"`
}

type Worker struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Role         string    `json:"role"`
	Endpoint     string    `json:"endpoint"`
	DPRank       int       `json:"dp_rank"`
	DPSize       int       `json:"dp_size"`
	Healthy      bool      `json:"healthy"`
	HealthReason string    `json:"health_reason"`
	HealthSince  time.Time `json:"health_since"`
	// Booked is the router's own load accounting; Scraped is what the worker's /metrics said.
	Booked           bookedJSON   `json:"booked"`
	KVCapacityBlocks int64        `json:"kv_capacity_blocks"` // -1 unknown
	MaxBatchedTokens int64        `json:"max_batched_tokens"` // 0 unknown
	Scraped          *scrapedJSON `json:"scraped"`            // null: never scraped
	Indexed          *indexedJSON `json:"indexed"`            // null: the index has no entry for it
	Events           *eventsJSON  `json:"events"`             // null: no KV event stream
}

type bookedJSON struct {
	Requests      int64 `json:"requests"`
	PrefillTokens int64 `json:"prefill_tokens"`
	DecodeBlocks  int64 `json:"decode_blocks"`
}

type scrapedJSON struct {
	At           time.Time `json:"at"`
	Running      *float64  `json:"running"` // null: the page had no request counts
	Waiting      *float64  `json:"waiting"`
	KVUsage      *float64  `json:"kv_usage"` // fraction; null unknown
	NumGPUBlocks int64     `json:"num_gpu_blocks"`
}

// indexedJSON counts the worker's blocks in the router's prefix index, by medium.
type indexedJSON struct {
	GPU  int `json:"gpu"`
	CPU  int `json:"cpu"`
	Disk int `json:"disk"`
}

type eventsJSON struct {
	Connected           bool     `json:"connected"`
	LastSeq             *uint64  `json:"last_seq"` // null: no batch yet
	Gaps                uint64   `json:"gaps"`
	Replays             uint64   `json:"replays"`
	ReplaysLost         uint64   `json:"replays_lost"`
	LastEventAgeSeconds *float64 `json:"last_event_age_seconds"` // null: no event yet
}

type decisionsJSON struct {
	Total  uint64         `json:"total"` // decisions recorded since the start
	Kept   int            `json:"kept"`  // the ring's size
	Latest []decisionJSON `json:"latest"`
}

// decisionJSON is one routed request: its decision record (route.Record's fields) and inputs.
type decisionJSON struct {
	Seq       uint64    `json:"seq"`
	At        time.Time `json:"at"`
	RequestID string    `json:"request_id"`
	Model     string    `json:"model"`
	LoRA      string    `json:"lora,omitempty"`
	Placement string    `json:"placement"`
	route.Record
	LatencyMicros float64     `json:"latency_us"`
	Inputs        *inputsJSON `json:"inputs"` // null for fallbacks (no policy decision)
}

// inputsJSON are the policy inputs beyond the record (conditional-disagg.md §3).
type inputsJSON struct {
	Policy              string  `json:"policy"`
	SnapshotVersion     uint64  `json:"snapshot_version"`
	PreviewDecode       string  `json:"preview_decode"`
	HostBlocks          int     `json:"host_blocks"`
	DiskBlocks          int     `json:"disk_blocks"`
	EffISLThreshold     int64   `json:"eff_isl_threshold"`
	RatioThreshold      float64 `json:"ratio_threshold"`
	Silent              bool    `json:"silent"`
	PrefillPreviewed    bool    `json:"prefill_previewed"`
	PreviewPrefill      string  `json:"preview_prefill"`
	PrefillRejected     bool    `json:"prefill_rejected"`
	PrefillActiveTokens int64   `json:"prefill_active_tokens"`
	PrefillBudget       float64 `json:"prefill_budget"`
	PrefillCached       int     `json:"prefill_cached_tokens"`
	ProjectedBlocks     int64   `json:"projected_decode_blocks"`
	KVCapacityBlocks    int64   `json:"kv_capacity_blocks"`
	DecodeBusyThreshold float64 `json:"decode_busy_threshold"`
	GuardEnabled        bool    `json:"guard_enabled"`
	Note                string  `json:"note,omitempty"` // the error behind remote_policy_error, or a note
	// The slo policy's objective and its forecast per placement (absent for the other policies).
	SLOTTFTms float64        `json:"slo_ttft_ms,omitempty"`
	SLOTPOTms float64        `json:"slo_tpot_ms,omitempty"`
	Estimates []estimateJSON `json:"estimates,omitempty"`
	// Fleet is the fleet steady state the slo policy decided with (slo_fleet; null before the
	// view has a second of history, and for the other policies).
	Fleet *fleetJSON `json:"fleet,omitempty"`
}

// fleetJSON is policy.FleetForecast: the pools' rates over the window and the request's
// forecast in each steady state.
type fleetJSON struct {
	WindowSeconds    float64    `json:"window_seconds"`
	Decode           poolJSON   `json:"decode_pool"`
	Prefill          poolJSON   `json:"prefill_pool"`
	Aggregated       regimeJSON `json:"aggregated"`
	Split            regimeJSON `json:"split"`
	OutputPerRequest float64    `json:"output_per_request"`
	PrefersSplit     bool       `json:"prefers_split"`
}

// poolJSON is one pool's rates per second (policy.PoolRates) and its prefill utilisation.
type poolJSON struct {
	Requests      float64 `json:"requests"`
	PrefillTokens float64 `json:"prefill_tokens"`
	OutputTokens  float64 `json:"output_tokens"`
	QueueGrowth   float64 `json:"queue_growth"`
	PrefillUtil   float64 `json:"prefill_util"`
}

// regimeJSON is policy.Regime.
type regimeJSON struct {
	Valid       bool    `json:"valid"`
	Workers     int     `json:"workers"`
	PrefillUtil float64 `json:"prefill_util"`
	Saturated   bool    `json:"saturated"`
	WaitMS      float64 `json:"wait_ms"`
	TTFTms      float64 `json:"ttft_ms"`
	TPOTms      float64 `json:"tpot_ms"`
	Headroom    float64 `json:"headroom"`
}

// fleetView is f for the page; nil when the decision had no view.
func fleetView(f *policy.FleetForecast) *fleetJSON {
	if f.View.Window <= 0 {
		return nil
	}
	pool := func(r policy.PoolRates, util float64) poolJSON {
		return poolJSON{Requests: r.Requests, PrefillTokens: r.PrefillTokens, OutputTokens: r.OutputTokens, QueueGrowth: r.QueueGrowth, PrefillUtil: util}
	}
	regime := func(r policy.Regime) regimeJSON {
		return regimeJSON{Valid: r.Valid, Workers: r.Workers, PrefillUtil: r.Util, Saturated: r.Saturated, WaitMS: r.WaitMS,
			TTFTms: r.TTFTms, TPOTms: r.TPOTms, Headroom: r.Headroom}
	}
	return &fleetJSON{WindowSeconds: f.View.Window.Seconds(), Decode: pool(f.View.Decode, f.DecodeUtil),
		Prefill: pool(f.View.Prefill, f.PrefillUtil), Aggregated: regime(f.Aggregated), Split: regime(f.Split),
		OutputPerRequest: f.OutputPerRequest, PrefersSplit: f.PrefersSplit()}
}

// estimateJSON is the slo policy's forecast for one placement (policy.Estimate).
type estimateJSON struct {
	Placement      string  `json:"placement"`
	Valid          bool    `json:"valid"`
	Prefill        string  `json:"prefill,omitempty"`
	Decode         string  `json:"decode,omitempty"`
	TTFTms         float64 `json:"ttft_ms"`
	TPOTms         float64 `json:"tpot_ms"`
	ExistingTPOTms float64 `json:"existing_tpot_ms"`
	Headroom       float64 `json:"headroom"`
	CachedTokens   int     `json:"cached_tokens"`
	TransferTokens int     `json:"transfer_tokens"`
	TTFTFactor     float64 `json:"ttft_factor"`
	TPOTFactor     float64 `json:"tpot_factor"`
}

type mixJSON struct {
	BucketSeconds float64         `json:"bucket_seconds"`
	Placements    []string        `json:"placements"` // the keys of every bucket's counts, in order
	Buckets       []mixBucketJSON `json:"buckets"`    // oldest first, the current bucket last
}

type mixBucketJSON struct {
	Start  time.Time        `json:"start"`
	Counts map[string]int64 `json:"counts"`
}

// shadowJSON is route.ShadowStats for the page.
type shadowJSON struct {
	Candidate   string            `json:"candidate"`
	Decisions   uint64            `json:"decisions"`
	SameRoute   uint64            `json:"same_route"`
	SameWorkers uint64            `json:"same_workers"`
	Pairs       map[string]uint64 `json:"pairs"` // "live→candidate" route pairs
	Reasons     map[string]uint64 `json:"candidate_reasons"`
}

func shadowView(st route.ShadowStats) *shadowJSON {
	if st.Config == "" {
		return nil
	}
	out := &shadowJSON{Candidate: st.Config, Decisions: st.Decisions, SameRoute: st.SameRoute, SameWorkers: st.SameWorkers,
		Pairs: map[string]uint64{}, Reasons: st.ByReason}
	for _, l := range policy.Routes() {
		for _, c := range policy.Routes() {
			if n := st.ByRoute[l][c]; n > 0 {
				out.Pairs[l.String()+"→"+c.String()] = n
			}
		}
	}
	return out
}

// stateView gathers the state for /ui/api/state at now, with up to limit decisions.
func (s *page) stateView(now time.Time, limit int) State {
	ready := s.Ready()
	live := s.Router.Policy().Disagg
	st := State{Now: now, Ready: ready, Policy: string(live.Policy), CostModel: costModelView(live), Shadow: shadowView(s.Router.ShadowStats())}
	streams := s.Streams()
	for _, m := range s.Router.Models() {
		mj := modelJSON{Name: m.Name, BlockSize: m.BlockSize, LoRAAdapters: m.LoRAAdapters, Workers: []Worker{}}
		for _, w := range m.Pool.Workers() {
			mj.Workers = append(mj.Workers, workerView(now, w, m.Index, streams))
		}
		st.Models = append(st.Models, mj)
	}
	st.Decisions = decisionsJSON{Total: s.Recent.Total(), Kept: s.Recent.Size(), Latest: []decisionJSON{}}
	for _, e := range s.Recent.Latest(make([]decisionlog.Entry, 0, min(limit, s.Recent.Size())), limit) {
		st.Decisions.Latest = append(st.Decisions.Latest, decisionView(e))
	}
	st.Transfers = []transferJSON{}
	for _, r := range s.Server.RecentTransfers(limit) {
		tj := transferJSON{At: r.At, RequestID: r.RequestID, Prefill: r.Prefill, Decode: r.Decode, Outcome: string(r.Outcome),
			PromptTokens: r.PromptTokens}
		if r.CachedTokens >= 0 {
			tj.CachedTokens = &r.CachedTokens
		}
		st.Transfers = append(st.Transfers, tj)
	}
	st.Mix = mixJSON{BucketSeconds: s.Recent.Bucket().Seconds(), Placements: decisionlog.PlacementNames[:]}
	for _, b := range s.Recent.Mix(now) {
		bj := mixBucketJSON{Start: b.Start, Counts: make(map[string]int64, decisionlog.NumPlacements)}
		for p, n := range b.Counts {
			bj.Counts[decisionlog.PlacementNames[p]] = n
		}
		st.Mix.Buckets = append(st.Mix.Buckets, bj)
	}
	return st
}

// workerView describes one worker of a model with index ix; streams may be nil.
func workerView(now time.Time, w pool.WorkerInfo, ix *kvindex.Index, streams admin.StreamReporter) Worker {
	wj := Worker{ID: w.ID, Name: w.Name, Role: string(w.Role), Endpoint: w.Endpoint, DPRank: w.Rank,
		DPSize: w.DataParallelSize, Healthy: w.Healthy, HealthReason: string(w.HealthReason), HealthSince: w.HealthSince,
		Booked:           bookedJSON{Requests: w.ActiveRequests, PrefillTokens: w.ActivePrefillTokens, DecodeBlocks: w.ActiveDecodeBlocks},
		KVCapacityBlocks: w.KVCapacityBlocks, MaxBatchedTokens: w.MaxBatchedTokens}
	if sc := w.Scrape; !sc.At.IsZero() {
		wj.Scraped = &scrapedJSON{At: sc.At, NumGPUBlocks: sc.NumGPUBlocks}
		if sc.HasRequests {
			wj.Scraped.Running, wj.Scraped.Waiting = &sc.Running, &sc.Waiting
		}
		if sc.KVUsage >= 0 {
			wj.Scraped.KVUsage = &sc.KVUsage
		}
	}
	if st, ok := ix.Stats(kvindex.WorkerID(w.ID)); ok {
		wj.Indexed = &indexedJSON{GPU: st.Blocks[kvindex.GPU], CPU: st.Blocks[kvindex.CPU], Disk: st.Blocks[kvindex.Disk]}
	}
	if streams == nil {
		return wj
	}
	if si, ok := streams.StreamInfo(w.ID); ok {
		ej := &eventsJSON{Connected: si.Connected, Gaps: si.Gaps, Replays: si.Replays, ReplaysLost: si.ReplaysLost}
		if si.HasLastSeq {
			ej.LastSeq = &si.LastSeq
		}
		if !si.LastEvent.IsZero() {
			age := now.Sub(si.LastEvent).Seconds()
			ej.LastEventAgeSeconds = &age
		}
		wj.Events = ej
	}
	return wj
}

// decisionView describes one recorded decision.
func decisionView(e decisionlog.Entry) decisionJSON {
	d := decisionJSON{Seq: e.Seq, At: e.At, RequestID: e.RequestID, Model: e.Model, LoRA: e.LoRA, Record: e.Record,
		LatencyMicros: float64(e.Latency.Nanoseconds()) / 1e3}
	d.Placement = decisionlog.PlacementNames[e.Placement]
	if e.Placement == decisionlog.PlacementFallback {
		return d
	}
	in := &e.Inputs
	d.Inputs = &inputsJSON{Policy: string(in.Policy), SnapshotVersion: in.SnapshotVersion, PreviewDecode: in.PreviewDecode,
		HostBlocks: in.HostBlocks, DiskBlocks: in.DiskBlocks, EffISLThreshold: in.EffISLThreshold,
		RatioThreshold: in.RatioThreshold, Silent: in.Silent, PrefillPreviewed: in.PrefillPreviewed,
		PreviewPrefill: in.PreviewPrefill, PrefillRejected: in.PrefillRejected, PrefillActiveTokens: in.PrefillActive,
		PrefillBudget: in.PrefillBudget, PrefillCached: in.PrefillCached, ProjectedBlocks: in.ProjectedBlocks,
		KVCapacityBlocks: in.KVCapacity, DecodeBusyThreshold: in.DecodeBusy, GuardEnabled: in.GuardEnabled}
	if in.Err != nil {
		d.Inputs.Note = in.Err.Error()
	}
	if in.Policy == policy.SLOKind {
		d.Inputs.SLOTTFTms, d.Inputs.SLOTPOTms = in.SLO.TTFT.Seconds()*1000, in.SLO.TPOT.Seconds()*1000
		for _, r := range policy.Routes() {
			e := in.Estimates[r]
			if r == policy.RouteHandoff && !e.Valid {
				continue // priced only with slo_handoff on (and a holder and a decoder)
			}
			d.Inputs.Estimates = append(d.Inputs.Estimates, estimateJSON{Placement: r.String(), Valid: e.Valid,
				Prefill: e.Prefill, Decode: e.Decode, TTFTms: e.TTFTms, TPOTms: e.TPOTms, ExistingTPOTms: e.ExistingTPOTms,
				Headroom: e.Headroom, CachedTokens: e.CachedTokens, TransferTokens: e.TransferTokens,
				TTFTFactor: e.TTFTFactor, TPOTFactor: e.TPOTFactor})
		}
		d.Inputs.Fleet = fleetView(&in.Fleet)
	}
	return d
}

// Configuration is /ui/api/config.
type Configuration struct {
	ConfigFile string         `json:"config_file"` // "" : flags only
	Admin      adminJSON      `json:"admin"`
	File       map[string]any `json:"file"` // the file merged with the flags, secrets redacted
}

// adminJSON says how the admin listeners are protected, never with what.
type adminJSON struct {
	Token    bool `json:"token"`     // a bearer token is required
	TLS      bool `json:"tls"`       // the admin listeners serve TLS
	ClientCA bool `json:"client_ca"` // clients must present a certificate (mTLS)
}

// configView describes the configuration in force (the last accepted reload).
func (s *page) configView() (Configuration, error) {
	cfg := s.Config()
	file, err := cfg.File.View()
	if err != nil {
		return Configuration{}, err
	}
	return Configuration{ConfigFile: s.ConfigPath, File: file, Admin: adminJSON{Token: cfg.Admin.Token != "",
		TLS: cfg.Admin.TLS != nil, ClientCA: cfg.File.AdminClientCA != ""}}, nil
}
