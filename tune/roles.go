package tune

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/condisagg/condisagg/cluster"
	"github.com/condisagg/condisagg/feedback"
	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/workload"
)

// --role-advice answers the operator's question "how many of my GPUs should prefill": for the
// run's trace and objective, the best prefill:decode split under each policy (always
// disaggregated, isl_or_load at Dynamo's defaults, slo) beside aggregated serving on every GPU;
// the smallest fleet on which the slo policy still serves the best goodput found; and whether
// the live service's analytic advice (condisagg_role_advice_prefill_workers) would have said
// the same.

// splitPolicies are the policies run on every split, in the order of the report.
var splitPolicies = [...]string{"disaggregated", string(policy.ISLOrLoad), string(policy.SLOKind)}

// RoleAdvice is --role-advice's answer.
type RoleAdvice struct {
	GPUs int `json:"gpus"`
	// Best is each policy's split with the most goodput on all GPUs ("aggregated" has one).
	Best []SplitChoice `json:"best"`
	// Split and Policy are the run with the most goodput of all (ties: lower TTFT p90).
	Split  string `json:"split"`
	Policy string `json:"policy"`
	// Target is that run's goodput; Tolerance how far below it a smaller fleet may stay.
	Target    float64 `json:"target_goodput"`
	Tolerance float64 `json:"tolerance"`
	// Fewest is the smallest fleet (then its best split) on which the slo policy serves at
	// least (1 - Tolerance)·Target; nil when it does not even on all GPUs.
	Fewest *SplitChoice `json:"fewest_gpus,omitempty"`
	// SLOAtAll is the slo policy's best goodput on all GPUs, a share of Target.
	SLOAtAll float64       `json:"slo_share_of_target"`
	Analytic AnalyticCheck `json:"analytic"`
}

// SplitChoice is one fleet shape and the policy that ran on it.
type SplitChoice struct {
	Policy  string  `json:"policy"`
	Split   string  `json:"split"`
	GPUs    int     `json:"gpus"`
	Goodput float64 `json:"goodput"`
}

// AnalyticCheck compares the live service's analytic advice with the simulated splits. The
// analytic advice divides the GPU time the traffic needs into prefill and decode work, which
// is the split of a strictly disaggregated fleet; so it is checked against the always-
// disaggregated runs. Under a conditional policy decode workers also prefill, and the split
// matters less (the slo rows show how much).
type AnalyticCheck struct {
	// OnSLO and OnDisagg are the advice on the mix of the slo and of the always-disaggregated
	// run at the --cluster split: what the metric reads when the fleet runs that policy.
	OnSLO        string  `json:"on_slo"`
	OnDisagg     string  `json:"on_disaggregated"`
	PrefillShare float64 `json:"prefill_share"` // of the always-disaggregated mix
	// BestDisagg is the always-disaggregated split with the most goodput; AtAdvice the
	// goodput of the always-disaggregated run at the advised split, a share of BestDisagg's.
	BestDisagg string  `json:"best_disaggregated"`
	AtAdvice   float64 `json:"goodput_at_advice"`
	// Agrees: the advised split serves within the tolerance of BestDisagg's goodput (one worker
	// off can cost a quarter of it, so nearness in workers is not enough). Why says what the
	// simulation saw when it does not.
	Agrees bool   `json:"agrees"`
	Why    string `json:"why,omitempty"`
}

// roleJobs are the runs on all GPUs: aggregated, then each split under each policy.
func (r *run) roleJobs() []*job {
	n := r.p.base.Prefill + r.p.base.Decode
	agg := r.p.base
	agg.Mode, agg.Prefill, agg.Decode = cluster.Aggregated, 0, n
	jobs := []*job{{name: fmt.Sprintf("0P%dD aggregated", n), cfg: agg}}
	for p := 1; p < n; p++ {
		for _, pol := range splitPolicies {
			jobs = append(jobs, r.splitJob(pol, p, n-p))
		}
	}
	return jobs
}

// splitJob is one policy on a pP dD fleet.
func (r *run) splitJob(pol string, p, d int) *job {
	var c cluster.Config
	switch pol {
	case "disaggregated":
		c = r.p.base
		c.Mode = cluster.Disaggregated
	case string(policy.ISLOrLoad):
		c = r.conditional(policy.ISLOrLoad, policy.DefaultEffISLThreshold, policy.DefaultEffISLRatioThreshold)
	default:
		c = r.slo()
	}
	c.Prefill, c.Decode = p, d
	return &job{name: fmt.Sprintf("%dP%dD %s", p, d, pol), cfg: c}
}

// plannedRoleJobs is the most simulations --role-advice runs: the splits of all GPUs, then the
// slo policy on every split of every smaller fleet down to two GPUs.
func (r *run) plannedRoleJobs() int {
	n := r.p.base.Prefill + r.p.base.Decode
	jobs := 1 + len(splitPolicies)*(n-1)
	for m := n - 1; m >= 2; m-- {
		jobs += m - 1
	}
	return jobs
}

// roleAdvice runs the splits, searches the fewest GPUs and checks the analytic advice.
func (r *run) roleAdvice(ctx context.Context, rep *Report) error {
	n := r.p.base.Prefill + r.p.base.Decode
	jobs := r.roleJobs()
	if err := r.runJobs(ctx, jobs); err != nil {
		return err
	}
	for _, j := range jobs {
		rep.Splits = append(rep.Splits, newRow(j))
	}
	ra := &RoleAdvice{GPUs: n, Tolerance: r.c.RoleTolerance}
	byPolicy := map[string][]*job{}
	for _, j := range jobs {
		pol := policyOf(j)
		byPolicy[pol] = append(byPolicy[pol], j)
	}
	for _, pol := range append([]string{"aggregated"}, splitPolicies[:]...) {
		ra.Best = append(ra.Best, choice(best(byPolicy[pol])))
	}
	top := best(jobs)
	ra.Split, ra.Policy, ra.Target = shapeOf(top), policyOf(top), top.sum.Goodput
	enough := (1 - ra.Tolerance) * ra.Target
	bestSLO := best(byPolicy[string(policy.SLOKind)])
	if ra.Target > 0 {
		ra.SLOAtAll = bestSLO.sum.Goodput / ra.Target
	}
	// Smaller fleets, one GPU less at a time, while the slo policy still serves enough on some
	// split: the first fleet that falls short ends the search, since one more GPU taken away
	// cannot serve more.
	done := 0
	if bestSLO.sum.Goodput >= enough && ra.Target > 0 {
		c := choice(bestSLO)
		ra.Fewest = &c
		for m := n - 1; m >= 2; m-- {
			var smaller []*job
			for p := 1; p < m; p++ {
				smaller = append(smaller, r.splitJob(string(policy.SLOKind), p, m-p))
			}
			if err := r.runJobs(ctx, smaller); err != nil {
				return err
			}
			done += len(smaller)
			for _, j := range smaller {
				rep.Smaller = append(rep.Smaller, newRow(j))
			}
			b := best(smaller)
			if b.sum.Goodput < enough {
				break
			}
			c := choice(b)
			ra.Fewest = &c
		}
	}
	// What the search did not need to run still counts as done on the progress bar.
	if skipped := r.plannedRoleJobs() - len(jobs) - done; skipped > 0 {
		r.prog.Advance("role advice (search ended)", skipped*len(r.w.Requests))
	}
	ra.Analytic = r.analyticCheck(byPolicy["disaggregated"], byPolicy[string(policy.SLOKind)])
	rep.Recommend.Roles = ra
	return nil
}

// analyticCheck prices the always-disaggregated run's mix (at the --cluster split) as the live
// service would, and compares the advice with the best always-disaggregated split.
func (r *run) analyticCheck(dis, slo []*job) AnalyticCheck {
	var a AnalyticCheck
	n := r.p.base.Prefill + r.p.base.Decode
	atBase := func(jobs []*job) *job {
		for _, j := range jobs {
			if j.cfg.Prefill == r.p.base.Prefill {
				return j
			}
		}
		return nil
	}
	cfg := r.slo()
	pc := policy.Config{Disagg: cfg.Disagg}
	if j := atBase(slo); j != nil {
		if adv := adviceOn(j.rep.Results, &pc, n); adv.Valid {
			a.OnSLO = adviceText(adv)
		}
	}
	j := atBase(dis)
	if j == nil {
		return a
	}
	adv := adviceOn(j.rep.Results, &pc, n)
	if !adv.Valid {
		a.Why = "no request completed with output on the always-disaggregated run"
		return a
	}
	a.OnDisagg, a.PrefillShare = adviceText(adv), adv.PrefillShare
	b := best(dis)
	a.BestDisagg = shapeOf(b)
	var at *job
	for _, d := range dis {
		if d.cfg.Prefill == adv.PrefillWorkers {
			at = d
		}
	}
	if at == nil || b.sum.Goodput <= 0 {
		a.Why = "the best always-disaggregated split serves no goodput"
		return a
	}
	a.AtAdvice = at.sum.Goodput / b.sum.Goodput
	a.Agrees = a.AtAdvice >= 1-r.c.RoleTolerance
	if !a.Agrees {
		a.Why = whyApart(at, b)
	}
	return a
}

// adviceOn is the live service's analytic advice (feedback.Learner) fed a run's answers: the
// prompt tokens each request computed are its prompt less what the engine's prefix cache
// served, as the engines' usage reports them.
func adviceOn(results []workload.Result, pc *policy.Config, workers int) feedback.RoleAdvice {
	l := feedback.New()
	for i := range results {
		res := &results[i]
		if !res.Completed() {
			continue
		}
		l.ObserveRouted(res.InputTokens, int64(res.InputTokens-max(res.CachedTokens, 0)))
		l.ObserveOutput(res.OutputTokens)
	}
	return l.Advice(pc, workers)
}

// whyApart says which pool limited the always-disaggregated run at the advised split, against
// the best split: the advice prices work without queueing, so it misses a pool that needs
// headroom for the objective's percentile rather than for its mean load.
func whyApart(at, bestJob *job) string {
	pool, util, metric, p := "decode", at.rep.DecodeUtil, "TPOT p99", at.sum.TPOT.P99
	if bestJob.cfg.Prefill > at.cfg.Prefill {
		pool, util, metric, p = "prefill", at.rep.PrefillUtil, "TTFT p90", at.sum.TTFT.P90
	}
	return fmt.Sprintf("at the advised %s the %s pool is %.0f%% busy and %s is %s: the objective needs more %s workers than the mean work share (%s serves %.0f%% more)",
		shapeOf(at), pool, 100*util, metric, p.Round(time.Millisecond), pool, shapeOf(bestJob), 100*(bestJob.sum.Goodput/at.sum.Goodput-1))
}

func adviceText(a feedback.RoleAdvice) string {
	return fmt.Sprintf("%dP%dD (prefill share %.2f)", a.PrefillWorkers, a.Workers-a.PrefillWorkers, a.PrefillShare)
}

func choice(j *job) SplitChoice {
	return SplitChoice{Policy: policyOf(j), Split: shapeOf(j), GPUs: j.cfg.Prefill + j.cfg.Decode, Goodput: j.sum.Goodput}
}

func shapeOf(j *job) string { return fmt.Sprintf("%dP%dD", j.cfg.Prefill, j.cfg.Decode) }

// policyOf is the policy of a role job, the last word of its name.
func policyOf(j *job) string { return j.name[strings.LastIndexByte(j.name, ' ')+1:] }

// writeRoles prints --role-advice's answer and its rows.
func writeRoles(b *strings.Builder, rep *Report) error {
	ra := rep.Recommend.Roles
	if ra == nil {
		return nil
	}
	fmt.Fprintf(b, "\nrole balance on %d GPUs (each policy on every split; aggregated on all):\n", ra.GPUs)
	if err := rowsTable(rep.Splits).Write(b); err != nil {
		return err
	}
	b.WriteString("best split per policy:\n")
	for _, c := range ra.Best {
		fmt.Fprintf(b, "  %-14s %-6s %.3f/s\n", c.Policy, c.Split, c.Goodput)
	}
	fmt.Fprintf(b, "most goodput: %s %s (%.3f/s)  <- recommended\n", ra.Split, ra.Policy, ra.Target)
	if ra.Fewest != nil {
		fmt.Fprintf(b, "fewest GPUs for it: the slo policy serves %.3f/s on %s (%d GPUs, within %.0f%% of %.3f/s)\n",
			ra.Fewest.Goodput, ra.Fewest.Split, ra.Fewest.GPUs, 100*ra.Tolerance, ra.Target)
	} else {
		fmt.Fprintf(b, "fewest GPUs for it: none; the slo policy reaches %.0f%% of it on all %d GPUs\n", 100*ra.SLOAtAll, ra.GPUs)
	}
	if len(rep.Smaller) > 0 {
		b.WriteString("smaller fleets (slo policy):\n")
		if err := rowsTable(rep.Smaller).Write(b); err != nil {
			return err
		}
	}
	a := ra.Analytic
	if a.OnDisagg == "" {
		fmt.Fprintf(b, "analytic advice: not available (%s)\n", a.Why)
		return nil
	}
	verdict := "agrees"
	if !a.Agrees {
		verdict = "differs: " + a.Why
	}
	fmt.Fprintf(b, "analytic advice (condisagg_role_advice_prefill_workers) on the always-disaggregated mix: %s; best always-disaggregated split %s; "+
		"the advised split serves %.0f%% of it: %s\n", a.OnDisagg, a.BestDisagg, 100*a.AtAdvice, verdict)
	if a.OnSLO != "" {
		fmt.Fprintf(b, "on the slo policy's mix it reads %s (decode workers also prefill there, so the split matters less)\n", a.OnSLO)
	}
	return nil
}
