package policy

import (
	"math"
	"math/rand/v2"
	"time"
)

// mode is a selection mode of conditional-disagg.md §6.3.
type mode uint8

const (
	modeBypass       mode = iota // decode preview and aggregated: general cost, track_prefill
	modeRemoteDecode             // decode target of the remote path: blocks only
	modePrefill                  // prefill preview and target: prefill term only
)

// selector evaluates the §6.1 cost over one pool. It is a value on the caller's stack so a
// selection allocates nothing.
type selector struct {
	loads   []WorkerLoad
	sigs    []Signal // aligned with loads, or nil for no overlap credit
	now     time.Time
	after   time.Duration // silence window
	minReq  int           // silence request floor
	cw      float64       // credit_weight
	hw, dw  float64       // host and disk weights
	scale   float64       // prefill_load_scale
	arw     float64       // active_request_weight
	temp    float64       // temperature
	decay   float64       // credit_decay, 0 = off
	mode    mode
	isl     float64
	bs      float64
	invBS   float64 // 1/bs: cost evaluation multiplies instead of dividing
	reqBlks float64 // ceil(ISL/bs)
	only    int     // restrict to this index, -1 = all
	skip    int     // never this index, -1 = none
	minApt  int64   // min apt over candidates, for credit_decay
}

func newSelector(cfg *Config, in *Input, loads []WorkerLoad, sigs []Signal, m mode) selector {
	bs := float64(cfg.BlockSize)
	sel := &cfg.Selection
	s := selector{loads: loads, sigs: sigs, now: in.Now, after: cfg.Silence.After, minReq: cfg.Silence.MinRequests,
		cw: sel.CreditWeight, hw: sel.HostWeight, dw: sel.DiskWeight, scale: sel.PrefillLoadScale,
		arw: sel.ActiveRequestWeight, temp: sel.Temperature, mode: m, isl: float64(in.ISL), bs: bs, invBS: 1 / bs,
		reqBlks: math.Ceil(float64(in.ISL) / bs), only: -1, skip: -1}
	if sel.CreditDecay > 0 && sigs != nil {
		s.decay = sel.CreditDecay
		s.minApt = math.MaxInt64
		for i := range loads {
			s.minApt = min(s.minApt, loads[i].ActivePrefillTokens)
		}
	}
	return s
}

// creditBlocks is credit(w): weighted overlap blocks, 0 when the worker's stream is silent.
func (s *selector) creditBlocks(i int) float64 {
	if s.sigs == nil {
		return 0
	}
	sg := &s.sigs[i]
	if !sg.Stream.Connected || (sg.Stream.RoutedSinceStored >= s.minReq && s.now.Sub(sg.Stream.LastStored) > s.after) {
		return 0 // Silent, inlined
	}
	gpu := s.cw * float64(sg.GPU)
	if s.decay > 0 {
		rb := max(s.reqBlks, 1)
		gpu /= 1 + s.decay*(float64(s.loads[i].ActivePrefillTokens-s.minApt)*s.invBS)/rb
	}
	return gpu + s.hw*float64(sg.Host) + s.dw*float64(sg.Disk)
}

// cost is logit(w) of §6.1 in the selector's mode; lower is better.
func (s *selector) cost(i int) float64 {
	l := &s.loads[i]
	reqs := s.arw * float64(l.ActiveRequests)
	if s.mode == modeRemoteDecode {
		return max(0, float64(l.ActiveDecodeBlocks)+s.reqBlks-s.creditBlocks(i)) + reqs
	}
	c := s.scale*max(0, (float64(l.ActivePrefillTokens)+s.isl)*s.invBS-s.creditBlocks(i)) + reqs
	if s.mode == modeBypass {
		c += float64(l.ActiveDecodeBlocks + l.NewBlocks)
	}
	return c
}

func (s *selector) candidate(i int) bool { return (s.only < 0 || s.only == i) && i != s.skip }

// pick selects a worker index (§6.2), or -1 when there is no candidate. Temperature 0 is the
// argmin with exact ties broken uniformly by reservoir sampling on rng; T > 0 samples
// p_i ∝ exp(−(c_i − c_min) / ((c_max − c_min)·T)). A nil rng takes the first minimum.
func (s *selector) pick(rng *rand.Rand) int {
	if s.temp > 0 && rng != nil {
		return s.sample(rng)
	}
	best, ties := -1, 0
	bestCost := math.Inf(1)
	for i := range s.loads {
		if !s.candidate(i) {
			continue
		}
		c := s.cost(i)
		switch {
		case best < 0 || c < bestCost:
			best, bestCost, ties = i, c, 1
		case c == bestCost:
			ties++
			if rng != nil && rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// pickBoth is the temperature-0 pick over the decode pool in bypass mode and, in the same pass
// (sharing each worker's credit), in remote-decode mode: the decode preview and the decode
// target should the decision go remote. Both are argmins with uniform random tie-breaks.
func (s *selector) pickBoth(rng *rand.Rand) (bypass, remote int) {
	bypass, remote = -1, -1
	var bt, rt int
	var bc, rc float64
	for i := range s.loads {
		if !s.candidate(i) {
			continue
		}
		l := &s.loads[i]
		credit := s.creditBlocks(i)
		reqs := s.arw * float64(l.ActiveRequests)
		b := s.scale*max(0, (float64(l.ActivePrefillTokens)+s.isl)*s.invBS-credit) + float64(l.ActiveDecodeBlocks+l.NewBlocks) + reqs
		r := max(0, float64(l.ActiveDecodeBlocks)+s.reqBlks-credit) + reqs
		bypass, bc, bt = reservoir(rng, i, b, bypass, bc, bt)
		remote, rc, rt = reservoir(rng, i, r, remote, rc, rt)
	}
	return bypass, remote
}

// reservoir folds candidate i with cost c into the running argmin (best, cost, ties).
func reservoir(rng *rand.Rand, i int, c float64, best int, bestCost float64, ties int) (int, float64, int) {
	switch {
	case best < 0 || c < bestCost:
		return i, c, 1
	case c == bestCost:
		ties++
		if rng != nil && rng.IntN(ties) == 0 {
			best = i
		}
	}
	return best, bestCost, ties
}

// sampleBuf bounds the stack buffer that holds costs, then weights, during softmax sampling;
// larger pools recompute them instead.
const sampleBuf = 256

func (s *selector) sample(rng *rand.Rand) int {
	var buf [sampleBuf]float64
	stored := len(s.loads) <= sampleBuf
	cmin, cmax, n := math.Inf(1), math.Inf(-1), 0
	for i := range s.loads {
		if !s.candidate(i) {
			continue
		}
		c := s.cost(i)
		if stored {
			buf[i] = c
		}
		cmin, cmax, n = min(cmin, c), max(cmax, c), n+1
	}
	if n == 0 {
		return -1
	}
	uniform := cmax == cmin
	scale := (cmax - cmin) * s.temp
	weight := func(i int) float64 {
		if uniform {
			return 1
		}
		var c float64
		if stored {
			c = buf[i]
		} else {
			c = s.cost(i)
		}
		return math.Exp(-(c - cmin) / scale)
	}
	total := 0.0
	for i := range s.loads {
		if s.candidate(i) {
			w := weight(i)
			if stored {
				buf[i] = w // the cost is not needed again
			}
			total += w
		}
	}
	u := rng.Float64() * total
	last := -1
	for i := range s.loads {
		if !s.candidate(i) {
			continue
		}
		last = i
		var w float64
		if stored && !uniform {
			w = buf[i]
		} else {
			w = weight(i)
		}
		if u -= w; u < 0 {
			return i
		}
	}
	return last
}

// cached is cached(w) of §1: round((overlap + hw·host + dw·disk)·bs), 0 for a silent stream,
// with the blocks capped at what the engine can serve from cache for an isl-token prompt.
func cached(cfg *Config, sg *Signal, now time.Time, isl int) int {
	if Silent(sg.Stream, now, cfg.Silence) {
		return 0
	}
	gpu, host, disk := CacheableBlocks(sg.GPU, sg.Host, sg.Disk, isl, cfg.BlockSize)
	sel := &cfg.Selection
	return max(0, int(math.Round((float64(gpu)+sel.HostWeight*float64(host)+sel.DiskWeight*float64(disk))*float64(cfg.BlockSize))))
}

// CacheableBlocks caps a worker's contiguous prefix (device blocks, then the host and disk
// blocks that continue it) at the blocks vLLM can serve from cache for an isl-token prompt. The
// engine always computes the prompt's last token (its prefix-cache hit is capped at isl−1
// tokens, whole blocks only), so a prompt of exactly n full blocks can reuse at most n−1.
func CacheableBlocks(gpu, host, disk, isl, bs int) (int, int, int) {
	limit := 0
	if isl > 0 && bs > 0 {
		limit = (isl - 1) / bs
	}
	gpu = min(max(gpu, 0), limit)
	host = min(max(host, 0), limit-gpu)
	disk = min(max(disk, 0), limit-gpu-host)
	return gpu, host, disk
}
