package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGeneratorsDeterministicForSeed(t *testing.T) {
	for _, name := range SyntheticNames() {
		t.Run(name, func(t *testing.T) {
			a, err := Synthetic(name, 42)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Synthetic(name, 42)
			c, _ := Synthetic(name, 43)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("same seed gave different workloads")
			}
			if reflect.DeepEqual(a, c) {
				t.Fatal("seeds 42 and 43 gave the same workload")
			}
			checkWellFormed(t, a)
		})
	}
	if _, err := Synthetic("nope", 1); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown name: %v", err)
	}
}

// checkWellFormed: arrival order, dense indexes, parents earlier, segment lengths match.
func checkWellFormed(t *testing.T, reqs []Request) {
	t.Helper()
	for i, r := range reqs {
		if r.Index != i || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
			t.Fatalf("request %d: index %d arrival %v after %v", i, r.Index, r.Arrival, reqs[max(i-1, 0)].Arrival)
		}
		if r.Parent >= i || (r.Parent >= 0 && (reqs[r.Parent].Session != r.Session || reqs[r.Parent].Turn != r.Turn-1)) {
			t.Fatalf("request %d (session %d turn %d) has parent %d", i, r.Session, r.Turn, r.Parent)
		}
		if segmentsLen(r.Prompt) != r.InputTokens || segmentsLen(r.Output) != r.OutputTokens || r.InputTokens < 1 {
			t.Fatalf("request %d: segments %d/%d tokens, lengths %d/%d", i, segmentsLen(r.Prompt), segmentsLen(r.Output), r.InputTokens, r.OutputTokens)
		}
	}
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.4g, want %.4g ± %.0f%%", what, got, want, 100*tol)
	}
}

func TestSharedPrefixMatchesSpec(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  SharedPrefixConfig
	}{{"sglang", SGLangSharedPrefix()}, {"vllm", VLLMPrefixRepetition()}, {"llmd", LLMDB2B()}} {
		t.Run(c.name, func(t *testing.T) {
			reqs, err := c.cfg.Generate(1)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != c.cfg.Requests {
				t.Fatalf("%d requests, want %d", len(reqs), c.cfg.Requests)
			}
			groups := map[uint64]int{}
			for _, r := range reqs {
				if r.InputTokens != c.cfg.PrefixTokens+c.cfg.QuestionTokens || r.OutputTokens != c.cfg.OutputTokens {
					t.Fatalf("request %d lengths %d/%d", r.Index, r.InputTokens, r.OutputTokens)
				}
				groups[r.Prompt[0].ID]++
			}
			if len(groups) != c.cfg.Groups {
				t.Fatalf("%d distinct prefixes, want %d", len(groups), c.cfg.Groups)
			}
			mean := float64(c.cfg.Requests) / float64(c.cfg.Groups)
			for id, n := range groups {
				if float64(n) < mean/3 || float64(n) > mean*3 {
					t.Fatalf("prefix %x used %d times, mean %.1f: groups are not uniform", id, n, mean)
				}
			}
			first, last := rateOf(reqs[:len(reqs)/10]), rateOf(reqs[len(reqs)*9/10:])
			wantFirst, wantLast := c.cfg.Rate, c.cfg.Rate
			if c.cfg.RateEnd > 0 {
				wantFirst = c.cfg.Rate + (c.cfg.RateEnd-c.cfg.Rate)*0.05
				wantLast = c.cfg.Rate + (c.cfg.RateEnd-c.cfg.Rate)*0.95
			}
			within(t, "rate over the first 10%", first, wantFirst, 0.25)
			within(t, "rate over the last 10%", last, wantLast, 0.25)
		})
	}
}

func rateOf(reqs []Request) float64 {
	return float64(len(reqs)-1) / (reqs[len(reqs)-1].Arrival - reqs[0].Arrival).Seconds()
}

// Requests of one group share the prefix tokens exactly, and nothing after it.
func TestSharedPrefixTokens(t *testing.T) {
	cfg := SharedPrefixConfig{Groups: 2, UsersPerGroup: 3, PrefixTokens: 100, QuestionTokens: 20, OutputTokens: 5, Requests: 40, Rate: 1}
	reqs, err := cfg.Generate(9)
	if err != nil {
		t.Fatal(err)
	}
	v := DefaultVocab()
	byGroup := map[uint64][]uint32{}
	for i := range reqs {
		toks := v.AppendPrompt(nil, &reqs[i])
		g := reqs[i].Prompt[0].ID
		if ref, ok := byGroup[g]; ok {
			if !slicesEqual(ref[:100], toks[:100]) || slicesEqual(ref[100:], toks[100:]) {
				t.Fatalf("request %d: prefix shared %v, question shared %v", i, slicesEqual(ref[:100], toks[:100]), slicesEqual(ref[100:], toks[100:]))
			}
		}
		byGroup[g] = toks
		if s := reqs[i].Session; s < 0 || s >= 6 {
			t.Fatalf("request %d: session %d outside [0, 6)", i, s)
		}
	}
	bad := SharedPrefixConfig{Groups: 0, Rate: -1, OutputTokens: -2}
	err = bad.Validate()
	for _, want := range []string{"groups: 0", "rate: -1", "output_tokens: -2", "requests: 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %q", err, want)
		}
	}
}

func TestAgenticMatchesSpecStatistically(t *testing.T) {
	cfg := AgenticCode()
	reqs, err := cfg.Generate(42)
	if err != nil {
		t.Fatal(err)
	}
	turns := map[int64]int{}
	var initial, out, newTok, think []float64
	groupOf := map[int64]uint64{}
	for _, r := range reqs {
		turns[r.Session]++
		out = append(out, float64(r.OutputTokens))
		groupOf[r.Session] = r.Prompt[1].ID
		if r.Turn == 0 {
			initial = append(initial, float64(r.InputTokens))
			continue
		}
		think = append(think, float64(r.ThinkTime)/float64(time.Millisecond))
		p := reqs[r.Parent]
		if r.Prompt[2].ID == p.Prompt[2].ID { // no reset: prompt = parent prompt + output + new
			newTok = append(newTok, float64(r.InputTokens-p.InputTokens-p.OutputTokens))
		}
	}
	if len(turns) != cfg.Sessions {
		t.Fatalf("%d sessions, want %d", len(turns), cfg.Sessions)
	}
	var turnCounts []float64
	for _, n := range turns {
		turnCounts = append(turnCounts, float64(n))
	}
	// resulting_stats of the aiperf profile.
	within(t, "turns per session mean", mean(turnCounts), 11.6, 0.05)
	within(t, "initial context mean", mean(initial), 54702, 0.08)
	within(t, "initial context median", median(initial), 47263, 0.08)
	within(t, "output tokens mean", mean(out), 991, 0.05)
	within(t, "output tokens median", median(out), 800, 0.05)
	within(t, "new tokens per turn mean", mean(newTok), 5758, 0.08)
	within(t, "new tokens per turn median", median(newTok), 4000, 0.08)
	// The think-time mixture of the transcribed parameters (0.7 agentic + 0.3 human); the
	// profile's resulting_stats (7,557 / 2,023 ms) do not follow from them, see AgenticCode.
	a, h := cfg.AgenticThink, cfg.HumanThink
	wantMean := 0.7*math.Exp(a.Mu+a.Sigma*a.Sigma/2) + 0.3*math.Exp(h.Mu+h.Sigma*h.Sigma/2)
	cdf := func(x float64) float64 {
		phi := func(l LogNormal) float64 { return 0.5 * (1 + math.Erf((math.Log(x)-l.Mu)/(l.Sigma*math.Sqrt2))) }
		return 0.7*phi(a) + 0.3*phi(h)
	}
	lo, hi := 1.0, 1e6
	for range 100 {
		if mid := math.Sqrt(lo * hi); cdf(mid) < 0.5 {
			lo = mid
		} else {
			hi = mid
		}
	}
	within(t, "think time mean (ms)", mean(think), wantMean, 0.15)
	within(t, "think time median (ms)", median(think), lo, 0.1)
	counts := map[uint64]int{}
	for _, g := range groupOf {
		counts[g]++
	}
	var cs []int
	for _, n := range counts {
		cs = append(cs, n)
	}
	slices.Sort(cs)
	// Zipf(0.6) over 100 groups: the top group gets ~3.6 % of sessions, the median one ~0.8 %.
	if top, mid := cs[len(cs)-1], cs[len(cs)/2]; len(cs) < 80 || top < 3*mid {
		t.Errorf("group popularity: %d groups, top %d sessions, median %d; want a Zipf skew", len(cs), top, mid)
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return QuantileSorted(s, 0.5)
}

// Each later turn's prompt starts with the previous turn's prompt and output tokens (unless
// its private context was reset), so a prefix cache holding the previous turn hits it all.
func TestAgenticTurnsExtendPreviousTurn(t *testing.T) {
	cfg := AgenticCode()
	cfg.Sessions, cfg.GlobalTokens, cfg.GroupTokens, cfg.MaxPromptTokens = 20, 300, 200, 20000
	cfg.SessionContext = LogNormal{Mu: 6, Sigma: 0.5, Max: 2000}
	cfg.NewTokens = LogNormal{Mu: 5, Sigma: 0.5, Max: 2000}
	cfg.OutputTokens = LogNormal{Mu: 4, Sigma: 0.5, Max: 500}
	reqs, err := cfg.Generate(3)
	if err != nil {
		t.Fatal(err)
	}
	checkWellFormed(t, reqs)
	v := DefaultVocab()
	extended, reset := 0, 0
	for i := range reqs {
		r := &reqs[i]
		if r.Parent < 0 {
			continue
		}
		p := &reqs[r.Parent]
		prev := v.AppendOutput(v.AppendPrompt(nil, p), p)
		cur := v.AppendPrompt(nil, r)
		if !slicesEqual(cur[:500], prev[:500]) {
			t.Fatalf("request %d does not share the 500 global+group tokens with its parent", i)
		}
		if r.Prompt[2].ID != p.Prompt[2].ID {
			reset++
			continue
		}
		extended++
		if len(cur) <= len(prev) || !slicesEqual(cur[:len(prev)], prev) {
			t.Fatalf("request %d: prompt (%d tokens) does not extend parent prompt+output (%d tokens)", i, len(cur), len(prev))
		}
	}
	if extended == 0 {
		t.Fatalf("no extended turns (%d resets)", reset)
	}
	if r := reqs[len(reqs)-1]; r.ThinkTime < 0 {
		t.Fatal("negative think time")
	}
}
