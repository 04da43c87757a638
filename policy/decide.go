package policy

import (
	"errors"
	"math/rand/v2"
)

// Decide runs the decision procedure of conditional-disagg.md §3 (steps 1–8) for one request
// on a snapshot of the pools. It is pure: no I/O, clock, goroutine, logging or allocation; the
// random source is the caller's (one per goroutine: *rand.Rand is not safe for concurrent use).
// The caller commits the result with pool.Pool.Book (route.Booking) (step 9) and, if a bypass
// commit is denied or its worker vanished, calls Demote.
func Decide(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand) Decision {
	dec := Decision{Decode: -1, Prefill: -1}
	dec.Inputs = Inputs{Policy: cfg.Disagg.Policy, SnapshotVersion: snap.Version, ISL: in.ISL,
		EffISLThreshold: cfg.Disagg.EffISLThreshold, RatioThreshold: cfg.Disagg.EffISLRatioThreshold,
		DecodeBusy: cfg.Disagg.DecodeBusyThreshold.Value, GuardEnabled: cfg.Disagg.DecodeBusyThreshold.Set}
	if cfg.BlockSize < 1 {
		dec.Inputs.Err = ErrInvalidConfig
		remote(cfg, sanitize(in, snap), snap, rng, &dec, ReasonRemotePolicyError)
		return dec
	}
	// Step 1: no prefill workers ⇒ aggregated, even when the feature is off.
	if len(snap.Prefill) == 0 {
		aggregated(cfg, in, snap, rng, &dec)
		return dec
	}
	// Step 2.
	if !cfg.Enabled {
		remote(cfg, sanitize(in, snap), snap, rng, &dec, ReasonRemoteDisabled)
		return dec
	}
	if !aligned(in.Decode, snap.Decode) {
		dec.Inputs.Err = ErrSignalsMismatch
		remote(cfg, withoutDecodeSignals(in), snap, rng, &dec, ReasonRemotePolicyError)
		return dec
	}
	prefillBad := in.Prefill != nil && !aligned(in.Prefill, snap.Prefill)
	if prefillBad {
		in = withoutPrefillSignals(in)
	}
	// Step 3: preconditions.
	only, reason := preconditions(in, snap, &dec)
	if reason != ReasonBypassISL {
		remote(cfg, in, snap, rng, &dec, reason)
		return dec
	}
	if cfg.Disagg.Policy == SLOKind {
		decideSLO(cfg, in, snap, rng, only, &dec)
		return dec
	}
	// Step 4: decode preview in bypass mode, without booking.
	sel := newSelector(cfg, in, snap.Decode, in.Decode, modeBypass)
	sel.only = only
	var d int
	if sel.temp > 0 && rng != nil {
		d = sel.pick(rng)
	} else {
		var r int
		d, r = sel.pickBoth(rng)
		dec.remoteHint = r + 1
	}
	// Soft session affinity: the worker of the session's last turn is both the preview and
	// the remote path's decode target while the guard admits it.
	b, aff := boundDecode(cfg, in, snap, only)
	dec.Inputs.Affinity, dec.Inputs.AffinityWorker = aff, in.Affinity
	if b >= 0 {
		d, dec.remoteHint = b, b+1
	}
	if d < 0 {
		remote(cfg, in, snap, rng, &dec, ReasonRemoteDecodeRejected)
		return dec
	}
	// Step 5: inputs.
	previewDecode(cfg, in, snap, d, &dec)
	// Step 6: prefill preview for load policies only; prefill signals that do not describe
	// the prefill pool are a preview error (busy unknown).
	if cfg.Disagg.Policy.loadBased() {
		if prefillBad {
			dec.Inputs.PrefillPreviewed, dec.Inputs.PrefillBusy, dec.Inputs.Err = true, BusyUnknown, ErrSignalsMismatch
		} else {
			previewPrefill(cfg, in, snap, rng, &dec)
		}
	}
	// Step 7: policy; step 8: decode-busy guard on a bypass only.
	reason = evaluate(cfg.Disagg.Policy, &dec.Inputs)
	if reason.Route() == RoutePrefill {
		dec.Gate = GateDeclinedByPolicy
		remote(cfg, in, snap, rng, &dec, reason)
		return dec
	}
	if denied := applyGuard(cfg, &dec, reason); denied != reason {
		remote(cfg, in, snap, rng, &dec, denied)
		return dec
	}
	dec.Route, dec.Reason, dec.Guard = RouteDecode, reason, cfg.Guard()
	dec.Decode, dec.DecodeID = d, snap.Decode[d].ID
	dec.Prefill, dec.PrefillID = -1, ""
	dec.PrefillTokens = int64(dec.Inputs.Eff)
	return dec
}

// preconditions is step 3. It returns the decode index a trusted decode pin restricts the
// preview to (-1 = none) and ReasonBypassISL when every precondition holds, else the remote
// reason (a resolved prefill pin is left in dec.Prefill).
func preconditions(in *Input, snap *Snapshot, dec *Decision) (int, Reason) {
	if in.ISL <= 0 {
		return -1, ReasonRemoteNoTokens
	}
	if in.Pin.Prefill != "" {
		if dec.Prefill = find(snap.Prefill, in.Pin.Prefill); dec.Prefill < 0 {
			dec.Inputs.Err = ErrPinUnresolved
		}
		return -1, ReasonRemotePrefillPinned
	}
	if in.Pin.Decode == "" {
		return -1, ReasonBypassISL
	}
	only := find(snap.Decode, in.Pin.Decode)
	if only < 0 {
		dec.Inputs.Err = ErrPinUnresolved
		return -1, ReasonRemoteDecodePinUnresolved
	}
	return only, ReasonBypassISL
}

// applyGuard is step 8 on a policy bypass: it sets the gate label and returns the policy's
// reason when the bypass stands, else remote_decode_busy or remote_capacity_unknown.
func applyGuard(cfg *Config, dec *Decision, reason Reason) Reason {
	switch cfg.Guard().CheckLoad(dec.Inputs.ProjectedBlocks, dec.Inputs.KVCapacity, dec.Inputs.ReportedKVUsage) {
	case VerdictOff:
		dec.Gate = GateAllowedDecodeGateDisabled
	case VerdictPass:
		dec.Gate = GateAllowedDecodeNotBusy
	case VerdictBusy:
		dec.Gate, reason = GateDeniedDecodeBusy, ReasonRemoteDecodeBusy
	case VerdictCapacityUnknown:
		dec.Gate, reason = GateDeniedDecodeBusyUnknown, ReasonRemoteCapacityUnknown
	}
	return reason
}

// evaluate is step 7 (§4.1), both comparisons strict.
func evaluate(k Kind, in *Inputs) Reason {
	effOK := int64(in.Eff) < in.EffISLThreshold
	islOK := effOK && in.Ratio < in.RatioThreshold
	islRemote := ReasonRemoteISLTooLong
	if effOK {
		islRemote = ReasonRemoteRatioTooHigh
	}
	if in.Silent {
		islRemote = ReasonRemoteNoKVEvents
	}
	busy := in.PrefillBusy == BusyTrue
	switch k {
	case PrefillLoad:
		switch in.PrefillBusy {
		case BusyTrue:
			return ReasonBypassPrefillBusy
		case BusyFalse:
			return ReasonRemotePrefillNotBusy
		}
		return ReasonRemotePrefillBusyUnknown
	case ISLOrLoad:
		switch {
		case islOK && busy:
			return ReasonBypassISLAndPrefillBusy
		case islOK:
			return ReasonBypassISL
		case busy:
			return ReasonBypassPrefillBusy
		}
		return islRemote
	}
	if islOK {
		return ReasonBypassISL
	}
	return islRemote
}

// previewDecode fills the step-5 inputs for the previewed decode worker d.
func previewDecode(cfg *Config, in *Input, snap *Snapshot, d int, dec *Decision) {
	sg := &in.Decode[d]
	l := &snap.Decode[d]
	x := &dec.Inputs
	x.PreviewDecode = l.ID
	x.Silent = Silent(sg.Stream, in.Now, cfg.Silence)
	if !x.Silent {
		x.Overlap, x.HostBlocks, x.DiskBlocks = sg.GPU, sg.Host, sg.Disk
	}
	x.Cached = cached(cfg, sg, in.Now, in.ISL)
	x.Eff = in.ISL - min(x.Cached, in.ISL)
	x.Ratio = float64(x.Eff) / float64(max(in.ISL, 1))
	x.ProjectedBlocks = l.ProjectedDecodeBlocks()
	x.KVCapacity = l.KVCapacityBlocks
	x.ReportedKVUsage = l.ReportedKVUsage
}

// previewPrefill is step 6: a non-booking prefill-mode selection and the busy test
// apt(p) > θp·mnbt(p). Every worker over the queue threshold (pool rejection) ⇒ true; a missing
// threshold ⇒ unknown.
func previewPrefill(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, dec *Decision) {
	x := &dec.Inputs
	x.PrefillPreviewed = true
	theta, ok := cfg.PrefillBusyThreshold()
	if !ok {
		x.PrefillBusy, x.Err = BusyUnknown, ErrNoThreshold
		return
	}
	sel := newSelector(cfg, in, snap.Prefill, in.Prefill, modePrefill)
	p := sel.pick(rng)
	l := &snap.Prefill[p]
	dec.Prefill = p
	x.PreviewPrefill = l.ID
	x.PrefillActive = l.ActivePrefillTokens
	x.PrefillBudget = theta * float64(mnbt(l))
	x.PrefillBusy = BusyFalse
	if prefillBusy(l, theta) {
		x.PrefillBusy = BusyTrue
	}
	// Pool rejection: with --router-queue-threshold set, every prefill worker above it means
	// the prefill pool would reject the request, which counts as busy.
	if q := cfg.QueueThreshold; q.Set {
		x.PrefillRejected = true
		for i := range snap.Prefill {
			if !prefillBusy(&snap.Prefill[i], q.Value) {
				x.PrefillRejected = false
				break
			}
		}
		if x.PrefillRejected {
			x.PrefillBusy = BusyTrue
		}
	}
}

func mnbt(l *WorkerLoad) int64 {
	if l.MaxBatchedTokens > 0 {
		return l.MaxBatchedTokens
	}
	return UnknownMaxBatchedTokens
}

func prefillBusy(l *WorkerLoad, theta float64) bool {
	return float64(l.ActivePrefillTokens) > theta*float64(mnbt(l))
}

// Fallback chooses the decode worker for a request that gets no policy decision (reason
// ReasonPassthrough or ReasonFailureOpen): a local-prefill selection over the decode pool, as in
// step 1, so fallbacks spread by load and cache like any bypass instead of piling onto one
// worker. in.ISL may be 0 (no prompt known); in.Decode may be nil (no overlap known). The
// caller books the result like a bypass.
func Fallback(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, reason Reason) Decision {
	dec := Decision{Decode: -1, Prefill: -1}
	dec.Inputs = Inputs{Policy: cfg.Disagg.Policy, SnapshotVersion: snap.Version, ISL: in.ISL}
	// Without a prompt the token and block terms of the cost are mostly 0, so open requests
	// must count or every fallback ties; weigh each at least one block.
	c := *cfg
	c.Selection.ActiveRequestWeight = max(c.Selection.ActiveRequestWeight, 1)
	aggregated(&c, in, snap, rng, &dec)
	dec.Reason = reason
	return dec
}

// aggregated is step 1: a bypass-mode decode selection with no policy, booked like a bypass.
func aggregated(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, dec *Decision) {
	dec.Route, dec.Reason = RouteDecode, ReasonNoPrefillWorkers
	sigs := in.Decode
	if !aligned(sigs, snap.Decode) {
		sigs = nil
	}
	sel := newSelector(cfg, in, snap.Decode, sigs, modeBypass)
	d := sel.pick(rng)
	b, aff := boundDecode(cfg, in, snap, -1)
	dec.Inputs.Affinity, dec.Inputs.AffinityWorker = aff, in.Affinity
	if b >= 0 {
		d = b
	}
	if d < 0 {
		dec.Inputs.Err = ErrNoTarget
		return
	}
	dec.Decode, dec.DecodeID = d, snap.Decode[d].ID
	if sigs != nil {
		previewDecode(cfg, in, snap, d, dec)
	} else {
		dec.Inputs.PreviewDecode = snap.Decode[d].ID
		dec.Inputs.Eff, dec.Inputs.Ratio = max(in.ISL, 0), 1
		dec.Inputs.ProjectedBlocks = snap.Decode[d].ProjectedDecodeBlocks()
		dec.Inputs.KVCapacity = snap.Decode[d].KVCapacityBlocks
	}
	dec.PrefillTokens = int64(dec.Inputs.Eff)
}

// remote sets the remote path (step 9's targets): the previewed or pinned prefill worker if
// any, else a prefill-mode selection, and a remote-decode-mode selection of the decode worker
// (overlap credit only when the feature is on; restricted to a resolved decode pin). in's
// signal slices must be aligned with snap or nil.
func remote(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, dec *Decision, reason Reason) {
	remoteExcept(cfg, in, snap, rng, dec, reason, -1)
}

// remoteExcept is remote with decode worker skip (-1 = none) excluded from the target selection.
func remoteExcept(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, dec *Decision, reason Reason, skip int) {
	dec.Route, dec.Reason, dec.Guard = RoutePrefill, reason, Guard{}
	psigs := in.Prefill
	if dec.Prefill < 0 || dec.Prefill >= len(snap.Prefill) {
		sel := newSelector(cfg, in, snap.Prefill, psigs, modePrefill)
		dec.Prefill = sel.pick(rng)
	}
	dec.PrefillID, dec.PrefillTokens, dec.Inputs.PrefillCached = "", 0, 0
	if dec.Prefill >= 0 {
		dec.PrefillID = snap.Prefill[dec.Prefill].ID
		if psigs != nil {
			dec.Inputs.PrefillCached = cached(cfg, &psigs[dec.Prefill], in.Now, in.ISL)
		}
		dec.PrefillTokens = int64(max(in.ISL, 0) - min(dec.Inputs.PrefillCached, max(in.ISL, 0)))
	}
	dsigs := in.Decode
	if !cfg.Enabled {
		dsigs = nil
	}
	if dec.remoteHint > 0 && skip < 0 {
		// Computed by the decode preview over the same workers, signals and pin.
		dec.Decode = dec.remoteHint - 1
	} else {
		sel := newSelector(cfg, in, snap.Decode, dsigs, modeRemoteDecode)
		sel.skip = skip
		if in.Pin.Decode != "" && reason != ReasonRemoteDecodePinUnresolved {
			sel.only = find(snap.Decode, in.Pin.Decode)
		}
		b, aff := boundDecode(cfg, in, snap, sel.only)
		if b == skip && b >= 0 {
			b, aff = -1, AffinityGone
		}
		if dec.Inputs.Affinity == AffinityNone {
			dec.Inputs.Affinity, dec.Inputs.AffinityWorker = aff, in.Affinity
		}
		if b >= 0 {
			dec.Decode = b
		} else {
			dec.Decode = sel.pick(rng)
		}
	}
	dec.DecodeID = ""
	if dec.Decode >= 0 {
		dec.DecodeID = snap.Decode[dec.Decode].ID
	}
	if !dec.Routable() && dec.Inputs.Err == nil {
		dec.Inputs.Err = ErrNoTarget
	}
}

// DemoteReason maps the error of a failed bypass booking to the reason Demote records:
// remote_decode_busy for ErrGuardDenied, remote_capacity_unknown for
// ErrCapacityUnknown, remote_policy_error for anything else (the decode worker vanished).
func DemoteReason(bookErr error) Reason {
	switch {
	case errors.Is(bookErr, ErrGuardDenied):
		return ReasonRemoteDecodeBusy
	case errors.Is(bookErr, ErrCapacityUnknown):
		return ReasonRemoteCapacityUnknown
	}
	return ReasonRemotePolicyError
}

// Demote turns a decision whose bypass commit failed into the remote path with reason
// (remote_decode_busy for ErrGuardDenied, remote_capacity_unknown for
// ErrCapacityUnknown, remote_policy_error otherwise), keeping its inputs and the previewed
// prefill worker. For remote_policy_error (the decode worker vanished, R7) that decode worker is
// excluded from the remote-decode selection. snap must be the snapshot the decision was made on.
// A remote booking that fails needs a new snapshot and a new Decide.
func Demote(cfg *Config, in *Input, snap *Snapshot, rng *rand.Rand, dec *Decision, reason Reason) {
	if reason.Route() != RoutePrefill {
		reason = ReasonRemotePolicyError
	}
	skip := -1
	switch reason {
	case ReasonRemoteDecodeBusy:
		dec.Gate = GateDeniedDecodeBusy
	case ReasonRemoteCapacityUnknown:
		dec.Gate = GateDeniedDecodeBusyUnknown
	case ReasonRemotePolicyError:
		if dec.Route == RouteDecode {
			skip = dec.Decode
		}
	}
	remoteExcept(cfg, sanitize(in, snap), snap, rng, dec, reason, skip)
}

// sanitize returns in, or a copy without the signal slices that do not describe snap.
func sanitize(in *Input, snap *Snapshot) *Input {
	if !aligned(in.Decode, snap.Decode) {
		in = withoutDecodeSignals(in)
	}
	if in.Prefill != nil && !aligned(in.Prefill, snap.Prefill) {
		in = withoutPrefillSignals(in)
	}
	return in
}

// withoutDecodeSignals and withoutPrefillSignals return a copy of in (on the caller's stack
// when it does not escape) with one signal slice dropped.
func withoutDecodeSignals(in *Input) *Input {
	c := *in
	c.Decode = nil
	return &c
}

func withoutPrefillSignals(in *Input) *Input {
	c := *in
	c.Prefill = nil
	return &c
}

// aligned reports whether sigs describe loads one to one, in order.
func aligned(sigs []Signal, loads []WorkerLoad) bool {
	if len(sigs) != len(loads) {
		return false
	}
	for i := range sigs {
		if sigs[i].Worker != loads[i].ID {
			return false
		}
	}
	return true
}

func find(loads []WorkerLoad, id string) int {
	for i := range loads {
		if loads[i].ID == id {
			return i
		}
	}
	return -1
}
