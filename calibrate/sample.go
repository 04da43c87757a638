package calibrate

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Sample is one measurement, as the fit reads it.
//
// A Prefill sample is one isolated prompt of ISL tokens of which the first Cached were a
// prefix-cache hit: MS is its TTFT, which covers Chunks steps (ceil(n / max_num_batched_tokens)
// for the n = ISL − Cached computed tokens) of t0 each, a1·n, a2·n·(Cached + n/2) (the chunks'
// query-key pairs telescope) and the request's own handling before the first step (HTTP,
// JSON, tokenization), fitted as a constant plus a cost per prompt token. The same prompt sent
// fresh and then again as a cache hit tells that per-token handling apart from a1: it is paid
// for all ISL tokens both times, a1 only for the computed ones.
//
// A Decode sample is the mean step time MS over Steps consecutive steps that ran Batch decode
// sequences and nothing else, whose context lengths summed to Contexts on average (each stream
// counts its prompt plus the tokens generated before the step, as the engine's attention reads).
//
// A Mixed sample is a decode sample whose window also holds one step that prefilled a fresh
// prompt of ISL tokens: its MS carries a1·ISL + a2·ISL²/2 times Share.
type Sample struct {
	Kind     Kind
	ISL      int
	Cached   int
	Chunks   int
	Batch    int
	Contexts float64
	Steps    int
	Share    float64 // Mixed: the mean over streams of 1/steps of their windows
	MS       float64
}

// PrefillSample is the sample of one isolated prompt of isl tokens, cached of them a prefix
// hit, whose first token came ttft after it was sent, on an engine with a step budget of mnbt
// tokens.
func PrefillSample(isl, cached, mnbt int, ttft time.Duration) Sample {
	n := isl - cached
	return Sample{Kind: Prefill, ISL: isl, Cached: cached, Chunks: (n + mnbt - 1) / mnbt, Batch: 1, MS: ms(ttft)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ErrNoSteadyWindow means a decode probe's streams never all ran together for long enough:
// their output was too short for the spread of their first tokens.
var ErrNoSteadyWindow = errors.New("calibrate: no steady decode window")

// minWindowSteps is the fewest pure-decode steps a decode sample averages over.
const minWindowSteps = 8

// DecodeSample turns one decode probe into a sample. prompts[i] is stream i's prompt length and
// times[i] the arrival times of its tokens (one per streamed event, times[i][0] the first
// token), all measured from one origin.
//
// The window starts after the last stream's first token (no prefill is left) and ends before
// the first stream's last token (no stream has finished), each shrunk by half a median gap so
// that client-side jitter cannot pull a mixed step in. Within it every step ran all streams.
// For each stream the window's duration divided by its token count is the mean step time;
// streams are averaged, which halves what jitter remains at the window's two ends.
func DecodeSample(prompts []int, times [][]time.Duration) (Sample, error) {
	w, err := steadyWindow(prompts, times)
	if err != nil {
		return Sample{}, err
	}
	return Sample{Kind: Decode, Batch: len(times), Contexts: w.contexts, Steps: w.steps, MS: w.meanMS}, nil
}

// window is the steady part of a set of lockstep streams.
type window struct {
	lo, hi   time.Duration // the window's bounds (client times)
	meanMS   float64       // mean step time, averaged over streams
	contexts float64       // mean context sum of its steps
	share    float64       // mean over streams of 1/steps: what one step's extra work adds to meanMS, per ms
	steps    int           // fewest steps of a stream in it
}

func steadyWindow(prompts []int, times [][]time.Duration) (window, error) {
	b := len(times)
	if b == 0 || len(prompts) != b {
		return window{}, fmt.Errorf("calibrate: decode sample: %d prompts for %d streams", len(prompts), b)
	}
	var start, end time.Duration
	var gaps []time.Duration
	for i, ts := range times {
		if len(ts) < 2 {
			return window{}, fmt.Errorf("%w: stream %d produced %d tokens", ErrNoSteadyWindow, i, len(ts))
		}
		if i == 0 || ts[0] > start {
			start = ts[0]
		}
		if i == 0 || ts[len(ts)-1] < end {
			end = ts[len(ts)-1]
		}
		for k := 1; k < len(ts); k++ {
			gaps = append(gaps, ts[k]-ts[k-1])
		}
	}
	slices.Sort(gaps)
	half := gaps[len(gaps)/2] / 2
	w := window{lo: start + half, hi: end - half}
	var sumMS float64
	for i, ts := range times {
		a := -1 // first token index inside (lo, hi)
		z := -1 // last token index inside (lo, hi)
		for k, t := range ts {
			if t > w.lo && t < w.hi {
				if a < 0 {
					a = k
				}
				z = k
			}
		}
		if a < 1 || z-a+1 < minWindowSteps {
			return window{}, fmt.Errorf("%w: stream %d has %d steps between the last first token and the first last token; want >= %d (more output tokens)",
				ErrNoSteadyWindow, i, max(0, z-a+1), minWindowSteps)
		}
		n := z - a + 1 // steps a..z, timed from the end of step a−1
		sumMS += ms(ts[z]-ts[a-1]) / float64(n)
		w.share += 1 / float64(n)
		// Token k comes from the step whose context is prompt + k; the window's mean is the midpoint.
		w.contexts += float64(prompts[i]) + float64(a+z)/2
		if i == 0 || n < w.steps {
			w.steps = n
		}
	}
	w.meanMS, w.share = sumMS/float64(b), w.share/float64(b)
	return w, nil
}

// MixedLead is how many tokens every background stream of a Mixed probe has produced before
// the driver sends the prompt.
const MixedLead = mixedLead

// MixedSample turns one Mixed probe into a sample: bgPrompts[i] and bgTimes[i] are the prompt
// length and token times of background stream i, firstToken the time the probe's prompt got
// its first token (the end of the step that prefilled it), all from one origin. The streams'
// steady window (as DecodeSample's) must hold that step: its mean step is then the decode
// steps' plus (a1·N + a2·N²/2) over the window's steps. A window rather than the one gap keeps
// a late read of the streams (tokens read in a burst on a busy client) from hiding the step.
func MixedSample(isl int, bgPrompts []int, bgTimes [][]time.Duration, firstToken time.Duration) (Sample, error) {
	w, err := steadyWindow(bgPrompts, bgTimes)
	if err != nil {
		return Sample{}, err
	}
	if firstToken <= w.lo || firstToken >= w.hi {
		return Sample{}, fmt.Errorf("%w: the prompt's first token came at %v, outside the streams' steady window [%v, %v]: it did not run beside the decodes (more output tokens)",
			ErrNoSteadyWindow, firstToken, w.lo, w.hi)
	}
	return Sample{Kind: Mixed, ISL: isl, Batch: len(bgTimes), Contexts: w.contexts, Steps: w.steps, Share: w.share, MS: w.meanMS}, nil
}
