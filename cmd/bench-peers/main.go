// Command bench-peers is condisagg's side-by-side benchmark against the peers' KV indexes
// (`make bench-peers`, BENCHMARKS.md "Peers").
//
// For every case of the grid it generates, from a fixed seed, recorded vLLM KVEventBatch
// payloads (msgpack, per worker) and a lookup set of unique prompts, then runs each harness in
// its own process on the same files: condisagg (this binary, -mode ours) and the Rust harness in
// bench/peers (dynamo-peers) for each of Dynamo's indexes. The generator also writes the answer a
// correct index must give for the lookup set; every run is checked against it. The output is
// a ratio table (condisagg against each peer index) and the absolute numbers behind it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/condisagg/condisagg/internal/flaglist"
)

type options struct {
	mode     string
	dir      string
	caseName string
	tokens   string
	workers  string
	overlap  string
	hashes   string
	entries  int
	seed     uint64
	lookupMS int
	dynamo   string
	indexes  string
	out      string
	cpuProf  string
	memProf  string
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "run", "run (whole grid), gen (generate one case), ours (measure condisagg on one generated case)")
	flag.StringVar(&o.dir, "dir", "", "directory for the generated files (default: a temporary directory, removed afterwards)")
	flag.StringVar(&o.caseName, "case", "", "one case for -mode gen/ours, e.g. 8k/w64/o50")
	flag.StringVar(&o.tokens, "tokens", "8192,32768", "prompt lengths in tokens")
	flag.StringVar(&o.workers, "workers", "8,64,256,1024", "fleet sizes")
	flag.StringVar(&o.overlap, "overlap", "0,50,95", "shared-prefix shares of a prompt, percent")
	flag.StringVar(&o.hashes, "engine-hashes", string(HashDynamo), "engine block hashes: dynamo (Dynamo's chained hash; every peer index works), fleet (vLLM, PYTHONHASHSEED set), worker (vLLM default)")
	flag.IntVar(&o.entries, "entries", 1<<20, "(block, worker) entries to index per case, about (at least one prompt per worker)")
	flag.Uint64Var(&o.seed, "seed", 1, "generator seed")
	flag.IntVar(&o.lookupMS, "lookup-ms", 300, "time spent repeating the lookup set, per run")
	flag.StringVar(&o.dynamo, "dynamo", "bench/peers/target/release/dynamo-peers", "the Rust harness binary (empty: condisagg alone)")
	flag.StringVar(&o.indexes, "indexes", "radix,crtc,positional", "Dynamo indexes to run")
	flag.StringVar(&o.out, "out", "", "also append every run's JSON line to this file")
	flag.StringVar(&o.cpuProf, "cpuprofile", "", "-mode ours: write a CPU profile of the lookup rounds to this file")
	flag.StringVar(&o.memProf, "memprofile", "", "-mode ours: write a heap profile of the index after ingest to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	switch o.mode {
	case "gen", "ours":
		c, err := parseCase(o.caseName, o.hashes)
		if err != nil {
			return err
		}
		if o.dir == "" {
			return errors.New("bench-peers: -mode " + o.mode + " needs -dir")
		}
		if o.mode == "gen" {
			ex, err := generate(o.dir, c, o.entries, o.seed)
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(ex)
		}
		res, err := measureOurs(caseFiles(o.dir, c), time.Duration(o.lookupMS)*time.Millisecond, o.cpuProf, o.memProf)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	case "run":
		return runGrid(ctx, o)
	}
	return fmt.Errorf("bench-peers: -mode %q: want run, gen or ours", o.mode)
}

// parseCase parses a case name such as "8k/w64/o50".
func parseCase(s, hashes string) (Case, error) {
	var c Case
	var k int
	if _, err := fmt.Sscanf(s, "%dk/w%d/o%d", &k, &c.Workers, &c.OverlapPct); err != nil {
		return c, fmt.Errorf("bench-peers: case %q: want <k tokens>k/w<workers>/o<percent>, e.g. 8k/w64/o50", s)
	}
	c.Tokens = k * 1024
	var err error
	if c.Hashes, err = parseHashMode(hashes); err != nil {
		return c, err
	}
	return c, validCase(c)
}

func validCase(c Case) error {
	if c.Tokens < blockSize || c.Workers < 1 || c.OverlapPct < 0 || c.OverlapPct > 99 {
		return fmt.Errorf("bench-peers: case %s: need tokens >= %d, workers >= 1, overlap in [0, 99]", c.Name(), blockSize)
	}
	return nil
}

func ints(flag, s string) ([]int, []error) {
	return flaglist.Parse(flag, s, "an integer", strconv.Atoi)
}

// grid returns the cases of o's lists, smallest first.
func grid(o options) ([]Case, error) {
	ts, errs := ints("-tokens", o.tokens)
	ws, e := ints("-workers", o.workers)
	errs = append(errs, e...)
	ov, e := ints("-overlap", o.overlap)
	errs = append(errs, e...)
	hm, err := parseHashMode(o.hashes)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	var cs []Case
	for _, t := range ts {
		for _, w := range ws {
			for _, p := range ov {
				c := Case{Tokens: t, Workers: w, OverlapPct: p, Hashes: hm}
				if err := validCase(c); err != nil {
					return nil, err
				}
				cs = append(cs, c)
			}
		}
	}
	return cs, nil
}

// caseRuns are the checked results of one case: condisagg's and each peer index's.
type caseRuns struct {
	c      Case
	expect Expect
	ours   Result
	peers  []Result
	errs   []error
}

func runGrid(ctx context.Context, o options) error {
	cases, err := grid(o)
	if err != nil {
		return err
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "condisagg-peers-"); err != nil {
			return fmt.Errorf("bench-peers: temp dir: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench-peers: own executable: %w", err)
	}
	var indexes []string
	if o.dynamo != "" {
		if _, err := os.Stat(o.dynamo); err != nil {
			return fmt.Errorf("bench-peers: Rust harness %s: %w (build it: cd bench/peers && cargo build --release --locked)", o.dynamo, err)
		}
		indexes = flaglist.Items(o.indexes)
	}
	var log io.Writer = io.Discard
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("bench-peers: -out: %w", err)
		}
		defer f.Close()
		log = f
	}
	var all []caseRuns
	for _, c := range cases {
		cr, err := runCase(ctx, o, dir, self, indexes, c, log)
		if err != nil {
			return err
		}
		for _, e := range cr.errs {
			fmt.Fprintln(os.Stderr, "CHECK FAILED:", e)
		}
		fmt.Fprintf(os.Stderr, "%s done (%d pairs)\n", c.Name(), cr.expect.Pairs)
		all = append(all, cr)
	}
	printTables(os.Stdout, all, indexes)
	return nil
}

// runCase generates one case, runs every harness on it in its own process and checks the runs.
func runCase(ctx context.Context, o options, dir, self string, indexes []string, c Case, log io.Writer) (caseRuns, error) {
	cr := caseRuns{c: c}
	ex, err := generate(dir, c, o.entries, o.seed)
	if err != nil {
		return cr, err
	}
	cr.expect = ex
	f := caseFiles(dir, c)
	defer func() { os.Remove(f.events); os.Remove(f.lookups); os.Remove(f.expect) }()
	ms := strconv.Itoa(o.lookupMS)
	cr.ours, err = runHarness(ctx, log, c, self, "-mode", "ours", "-dir", dir, "-case", c.Name(), "-engine-hashes", string(c.Hashes), "-lookup-ms", ms)
	if err != nil {
		return cr, err
	}
	cr.errs = append(cr.errs, check(ex, cr.ours)...)
	for _, ix := range indexes {
		r, err := runHarness(ctx, log, c, o.dynamo, "--index", ix, "--events", f.events, "--lookups", f.lookups, "--lookup-ms", ms)
		if err != nil {
			return cr, err
		}
		cr.errs = append(cr.errs, check(ex, r)...)
		cr.peers = append(cr.peers, r)
	}
	return cr, nil
}

// runHarness runs one harness process on case c and decodes the JSON line it prints; log gets
// that line with the case's name as its first field ("case"), which cmd/bench-curves reads.
func runHarness(ctx context.Context, log io.Writer, c Case, name string, args ...string) (Result, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("bench-peers: run %s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	sc := bufio.NewScanner(&stdout)
	var last []byte
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && l[0] == '{' {
			last = append(last[:0], l...)
		}
	}
	var r Result
	if err := json.Unmarshal(last, &r); err != nil {
		return r, fmt.Errorf("bench-peers: %s printed no result line: %w", filepath.Base(name), err)
	}
	if len(last) > 2 {
		fmt.Fprintf(log, "{\"case\":%q,%s\n", c.Name(), last[1:])
	}
	return r, nil
}

// check compares a run with the generator's expectations.
func check(ex Expect, r Result) []error {
	var errs []error
	bad := func(what string, got, want int64) {
		if got != want {
			errs = append(errs, fmt.Errorf("%w: %s %s: %s = %d, want %d", errChecksum, ex.Case, r.Impl, what, got, want))
		}
	}
	bad("pairs", r.Pairs, ex.Pairs)
	bad("batches", r.Batches, ex.Batches)
	bad("filtered events", r.Filtered, 0)
	bad("rejected events", r.Rejected, 0)
	bad("score_sum", r.ScoreSum, ex.ScoreSum)
	bad("hits", r.Hits, ex.Hits)
	return errs
}
