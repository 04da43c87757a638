package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/condisagg/condisagg/kvevents"
	"github.com/condisagg/condisagg/kvindex"
	"github.com/prometheus/client_golang/prometheus"
)

// Result is one harness run on one case, printed as one JSON line by both harnesses (the Rust
// harness writes the same field names).
type Result struct {
	Impl         string  `json:"impl"`
	Batches      int64   `json:"batches"`
	Events       int64   `json:"events"`
	Filtered     int64   `json:"filtered"` // events the ingest path dropped before the index
	Rejected     int64   `json:"rejected"` // events the index refused
	Pairs        int64   `json:"pairs"`
	IngestWallS  float64 `json:"ingest_wall_s"`
	IngestCPUS   float64 `json:"ingest_cpu_s"`
	IndexBytes   int64   `json:"index_bytes"`
	Lookups      int     `json:"lookups"`
	LookupBlocks int     `json:"lookup_blocks"`
	LookupNS     float64 `json:"lookup_ns"`      // CPU time per lookup (the process's)
	LookupWallNS float64 `json:"lookup_wall_ns"` // wall time per lookup
	ScoreSum     int64   `json:"score_sum"`
	Hits         int64   `json:"hits"`
	PeakRSSKB    int64   `json:"peak_rss_kb"`
}

// measureOurs runs condisagg's path on one case: kvevents.Applier.ApplyPayload per recorded
// batch (decode, keys from the token ids, apply under one index lock per batch), then
// kvindex.Index.Overlap on the lookup set with its keys computed beforehand.
func measureOurs(f files, lookupBudget time.Duration, cpuProfile, memProfile string) (Result, error) {
	keys, bs, err := readLookupKeys(f.lookups)
	if err != nil {
		return Result{}, err
	}
	res := Result{Impl: "condisagg", Lookups: len(keys)}
	for _, k := range keys {
		res.LookupBlocks += len(k)
	}

	heap0 := heapInUse()
	ix, err := kvindex.New(kvindex.Config{BlockSize: bs})
	if err != nil {
		return res, err
	}
	if err := ingestOurs(ix, f.events, &res); err != nil {
		return res, err
	}
	res.IndexBytes = heapInUse() - heap0
	if memProfile != "" {
		if err := writeHeapProfile(memProfile); err != nil {
			return res, err
		}
	}

	var out kvindex.Overlaps
	for _, k := range keys {
		ix.Overlap(k, &out)
		for _, w := range out.Workers {
			if w.GPU > 0 {
				res.Hits++
				res.ScoreSum += int64(w.GPU)
			}
		}
	}
	if cpuProfile != "" {
		pf, err := os.Create(cpuProfile)
		if err != nil {
			return res, fmt.Errorf("bench-peers: -cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return res, fmt.Errorf("bench-peers: -cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var rounds int
	var spent time.Duration
	cpu0 := cpuTime()
	for rounds == 0 || spent < lookupBudget {
		t0 := time.Now()
		for _, k := range keys {
			ix.Overlap(k, &out)
		}
		spent += time.Since(t0)
		rounds++
	}
	res.LookupNS = float64((cpuTime() - cpu0).Nanoseconds()) / float64(rounds*len(keys))
	runtime.KeepAlive(ix)
	res.LookupWallNS = float64(spent.Nanoseconds()) / float64(rounds*len(keys))
	res.PeakRSSKB = peakRSSKB()
	return res, nil
}

// ingestOurs applies every recorded batch with one Applier per worker stream.
func ingestOurs(ix *kvindex.Index, path string, res *Result) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bench-peers: open %s: %w", path, err)
	}
	defer in.Close()
	r := bufio.NewReaderSize(in, 1<<20)
	var hdr [32]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:8]) != eventsMagic {
		return fmt.Errorf("bench-peers: read %s: not a bench-peers events file (%v)", path, err)
	}
	workers := int(binary.LittleEndian.Uint32(hdr[8:]))
	res.Pairs = int64(binary.LittleEndian.Uint64(hdr[16:]))
	res.Batches = int64(binary.LittleEndian.Uint64(hdr[24:]))
	m := kvevents.NewMetrics(prometheus.NewRegistry())
	appliers := make([]*kvevents.Applier, workers)
	for w := range appliers {
		appliers[w] = kvevents.NewApplier(ix, kvindex.WorkerID("w"+strconv.Itoa(w)), 0, m, kvevents.Limits{})
	}
	var payload []byte
	var wall time.Duration
	cpu0 := cpuTime()
	for range res.Batches {
		var rec [8]byte
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			return fmt.Errorf("bench-peers: read %s: %w", path, err)
		}
		w, n := binary.LittleEndian.Uint32(rec[:4]), int(binary.LittleEndian.Uint32(rec[4:]))
		if cap(payload) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("bench-peers: read %s: %w", path, err)
		}
		t0 := time.Now()
		a := appliers[w]
		if err := a.ApplyPayload(payload); err != nil {
			return fmt.Errorf("bench-peers: apply batch of worker %d: %w", w, err)
		}
		res.Events += int64(len(a.Batch().Events))
		res.Rejected += int64(len(a.Batch().Events) - a.StoredInLastBatch())
		wall += time.Since(t0)
	}
	res.IngestCPUS = (cpuTime() - cpu0).Seconds()
	res.IngestWallS = wall.Seconds()
	return nil
}

// readLookupKeys reads the lookup set and returns each prompt's router keys, computed as the
// router does (kvindex.AppendKeys), and the block size. Prompts are read one at a time.
func readLookupKeys(path string) ([][]uint64, int, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("bench-peers: read lookups: %w", err)
	}
	defer in.Close()
	r := bufio.NewReaderSize(in, 1<<20)
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:8]) != lookupsMagic {
		return nil, 0, fmt.Errorf("bench-peers: read %s: not a bench-peers lookups file (%v)", path, err)
	}
	bs, n := int(binary.LittleEndian.Uint32(hdr[8:])), int(binary.LittleEndian.Uint32(hdr[12:]))
	out := make([][]uint64, 0, n)
	var buf []byte
	var tokens []uint32
	for range n {
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, 0, fmt.Errorf("bench-peers: read %s: %w", path, err)
		}
		nt := int(binary.LittleEndian.Uint32(l[:]))
		buf = append(buf[:0], make([]byte, 4*nt)...)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, 0, fmt.Errorf("bench-peers: read %s: %w", path, err)
		}
		tokens = tokens[:0]
		for i := range nt {
			tokens = append(tokens, binary.LittleEndian.Uint32(buf[4*i:]))
		}
		out = append(out, kvindex.AppendKeys(make([]uint64, 0, nt/bs), 0, tokens, bs, nil))
	}
	return out, bs, nil
}

// heapInUse returns the live heap after a full collection.
// writeHeapProfile writes the live heap (as of the last collection) to path.
func writeHeapProfile(path string) error {
	pf, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench-peers: -memprofile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(pf, 0); err != nil {
		pf.Close()
		return fmt.Errorf("bench-peers: -memprofile: %w", err)
	}
	if err := pf.Close(); err != nil {
		return fmt.Errorf("bench-peers: -memprofile: %w", err)
	}
	return nil
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// cpuTime returns the CPU time the process has used (all threads, the collector included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSKB returns the process's peak resident set (VmHWM), or 0 where /proc is missing.
func peakRSSKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

var errChecksum = errors.New("bench-peers: lookup results differ from the generator's expectation")
