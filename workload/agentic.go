package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// AgenticConfig generates Claude-Code-like agentic coding sessions after aiperf's
// "agentic-code" profile (synthetic_specs: aiperf_agentic_code_inference_day_2026). A session's
// first prompt is a global shared prefix (GlobalTokens, the same for every session), a group
// prefix (GroupTokens, one of Groups chosen by Zipf(GroupZipfAlpha)) and a private context
// drawn from SessionContext. Every later turn's prompt is the previous prompt, the previous
// output and NewTokens fresh tokens, so consecutive turns share everything but the new part.
// Before each later turn the private context is reset (a compaction: a fresh private stream
// with a new SessionContext draw) with probability ResetBase·(1+ResetContextScaling·ctx/
// MaxPromptTokens), and always when the prompt would exceed MaxPromptTokens.
//
// Sessions start as a Poisson process at SessionRate. A turn's nominal Arrival is the
// previous turn's Arrival plus its output at EstimatedTPOT plus the think time; Parent and
// ThinkTime let a closed-loop replayer send it ThinkTime after the previous turn completes
// instead.
type AgenticConfig struct {
	Sessions            int
	SessionRate         float64 // sessions started per second
	TurnsMin, TurnsMax  int     // turns per session, uniform in [TurnsMin, TurnsMax]
	GlobalTokens        int
	GroupTokens         int
	Groups              int
	GroupZipfAlpha      float64
	SessionContext      LogNormal // tokens of private context at session start
	NewTokens           LogNormal // fresh tokens per later turn
	OutputTokens        LogNormal // generation length
	MaxPromptTokens     int
	AgenticFraction     float64   // share of think times drawn from AgenticThink
	AgenticThink        LogNormal // ms
	HumanThink          LogNormal // ms
	ResetBase           float64
	ResetContextScaling float64
	EstimatedTPOT       time.Duration // per output token, for nominal arrivals only
}

// AgenticCode is the aiperf agentic-code profile: 1,131 sessions, 32k global + 10k group
// prefix (100 groups, Zipf 0.6), private context lognormal median 5k capped at 50k, ~6k new
// and ~1k output tokens per turn, think times 70 % agentic (median 2 s) and 30 % human
// (median 15 s). TurnsMin/TurnsMax 6–17 reproduce the profile's 11.6 mean / 11 median turns
// per session; SessionRate 0.25/s and EstimatedTPOT 20 ms are our choices (not published).
// The think-time parameters are the profile's as transcribed; their mixture has mean ≈ 12.5 s
// and median ≈ 3.6 s, not the 7.6 s / 2.0 s of the profile's resulting_stats (the generator
// that produced those evidently applies rules the transcription does not record). The
// profile's restart_fraction / restart_turn_range are not modelled.
func AgenticCode() AgenticConfig {
	return AgenticConfig{
		Sessions: 1131, SessionRate: 0.25, TurnsMin: 6, TurnsMax: 17,
		GlobalTokens: 32000, GroupTokens: 10000, Groups: 100, GroupZipfAlpha: 0.6,
		SessionContext:  LogNormal{Mu: 8.517193191416238, Sigma: 1.4823038073675112, Max: 50000},
		NewTokens:       LogNormal{Mu: 8.294049640102028, Sigma: 0.9005166385005492, Max: 50000},
		OutputTokens:    LogNormal{Mu: 6.684611727667927, Sigma: 0.6680472308365776, Max: 10000},
		MaxPromptTokens: 200000, AgenticFraction: 0.7,
		AgenticThink: LogNormal{Mu: 7.600902459542082, Sigma: 1.3537287260556712, Max: 600000},
		HumanThink:   LogNormal{Mu: 9.615805480084347, Sigma: 1.1774100225154747, Max: 600000},
		ResetBase:    0.05, ResetContextScaling: 1.5, EstimatedTPOT: 20 * time.Millisecond,
	}
}

// Validate returns every problem of c in the field/value/rule form.
func (c AgenticConfig) Validate() error {
	var errs []error
	add := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	add(c.Sessions >= 1, "sessions: %d must be at least 1", c.Sessions)
	add(c.SessionRate > 0 && !math.IsInf(c.SessionRate, 0), "session_rate: %v must be a positive finite sessions/s", c.SessionRate)
	add(c.TurnsMin >= 1 && c.TurnsMax >= c.TurnsMin, "turns: [%d, %d] must satisfy 1 <= min <= max", c.TurnsMin, c.TurnsMax)
	add(c.GlobalTokens >= 0 && c.GroupTokens >= 0, "global_tokens, group_tokens: %d, %d must be non-negative", c.GlobalTokens, c.GroupTokens)
	add(c.Groups >= 1, "groups: %d must be at least 1", c.Groups)
	add(c.GroupZipfAlpha >= 0 && !math.IsInf(c.GroupZipfAlpha, 0), "group_zipf_alpha: %v must be finite and >= 0", c.GroupZipfAlpha)
	add(c.MaxPromptTokens > c.GlobalTokens+c.GroupTokens, "max_prompt_tokens: %d must exceed global+group tokens %d", c.MaxPromptTokens, c.GlobalTokens+c.GroupTokens)
	add(c.AgenticFraction >= 0 && c.AgenticFraction <= 1, "agentic_fraction: %v must be in [0, 1]", c.AgenticFraction)
	add(c.ResetBase >= 0 && c.ResetContextScaling >= 0, "reset: base %v and context_scaling %v must be >= 0", c.ResetBase, c.ResetContextScaling)
	add(c.EstimatedTPOT >= 0, "estimated_tpot: %v must be >= 0", c.EstimatedTPOT)
	for _, d := range []struct {
		name string
		l    LogNormal
	}{{"session_context", c.SessionContext}, {"new_tokens", c.NewTokens}, {"output_tokens", c.OutputTokens}, {"agentic_think", c.AgenticThink}, {"human_think", c.HumanThink}} {
		if err := d.l.validate(d.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Generate returns the workload for seed, in nominal arrival order; the same seed gives the
// same requests and tokens. Each session draws from its own random stream, so changing
// Sessions keeps the sessions that remain.
func (c AgenticConfig) Generate(seed uint64) ([]Request, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("workload: agentic config: %w", err)
	}
	zipf := zipfCDF(c.Groups, c.GroupZipfAlpha)
	starts := newRand(seed, kindSession)
	var reqs []Request
	var t float64
	for s := range c.Sessions {
		t += starts.ExpFloat64() / c.SessionRate
		reqs = c.session(reqs, seed, int64(s), time.Duration(t*float64(time.Second)), zipf)
	}
	sortByArrival(reqs)
	return reqs, nil
}

// session appends the turns of session s, starting at start.
func (c AgenticConfig) session(reqs []Request, seed uint64, s int64, start time.Duration, zipf []float64) []Request {
	r := newRand(seed, uint64(s)<<8|kindSession)
	group := sort.SearchFloat64s(zipf, r.Float64())
	shared := make([]Segment, 0, 2)
	if c.GlobalTokens > 0 {
		shared = append(shared, Segment{ID: synthID(seed, kindGlobal, 0, 0), Len: uint32(c.GlobalTokens)})
	}
	if c.GroupTokens > 0 {
		shared = append(shared, Segment{ID: synthID(seed, kindGroup, uint64(group), 0), Len: uint32(c.GroupTokens)})
	}
	sharedLen := c.GlobalTokens + c.GroupTokens
	epoch := uint64(0)
	stream := synthID(seed, kindSession, uint64(s), epoch)
	ctx := c.SessionContext.tokens(r) // private stream tokens in the prompt
	turns := c.TurnsMin + r.IntN(c.TurnsMax-c.TurnsMin+1)
	arrival, parent := start, -1
	var think time.Duration
	for turn := range turns {
		out := c.OutputTokens.tokens(r)
		if turn > 0 {
			newTok := c.NewTokens.tokens(r)
			p := c.ResetBase * (1 + c.ResetContextScaling*float64(sharedLen+ctx)/float64(c.MaxPromptTokens))
			if r.Float64() < p || sharedLen+ctx+newTok > c.MaxPromptTokens {
				epoch++
				stream = synthID(seed, kindSession, uint64(s), epoch)
				ctx = c.SessionContext.tokens(r) + newTok
			} else {
				ctx += newTok
			}
			ctx = min(ctx, c.MaxPromptTokens-sharedLen)
		}
		prompt := append(shared[:len(shared):len(shared)], Segment{ID: stream, Len: uint32(ctx)})
		reqs = append(reqs, Request{
			Index: len(reqs), Arrival: arrival, Session: s, Turn: turn, Parent: parent, ThinkTime: think,
			InputTokens: sharedLen + ctx, OutputTokens: out, Prompt: prompt,
			Output: []Segment{{ID: stream, Start: uint32(ctx), Len: uint32(out)}},
		})
		parent = len(reqs) - 1
		ctx += out
		think = c.think(r)
		arrival += time.Duration(out)*c.EstimatedTPOT + think
	}
	return reqs
}

func (c AgenticConfig) think(r *rand.Rand) time.Duration {
	d := c.HumanThink
	if r.Float64() < c.AgenticFraction {
		d = c.AgenticThink
	}
	return time.Duration(d.sample(r) * float64(time.Millisecond))
}

// zipfCDF is the cumulative distribution of ranks 1..n with weights k^-alpha, normalised.
func zipfCDF(n int, alpha float64) []float64 {
	cdf := make([]float64, n)
	var sum float64
	for k := range n {
		sum += math.Pow(float64(k+1), -alpha)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	cdf[n-1] = 1
	return cdf
}
