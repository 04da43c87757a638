package vllmsim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// HeaderDPRank is the header vLLM's OpenAI server reads to pin a request to one data-parallel
// engine (vllm/entrypoints/openai: _get_data_parallel_rank reads "X-data-parallel-rank";
// header names are case-insensitive).
const HeaderDPRank = "X-data-parallel-rank"

// ErrRankOutOfRange is the answer to a rank header outside [0, data_parallel_size): vLLM's
// input processor raises "data_parallel_rank R is out of range [0, N)." and the server
// answers 400.
type ErrRankOutOfRange struct{ Rank, Size int }

func (e ErrRankOutOfRange) Error() string {
	return fmt.Sprintf("data_parallel_rank %d is out of range [0, %d).", e.Rank, e.Size)
}

// ranks is the data-parallel engines behind one HTTP server and vLLM's choice among them. It
// is safe for concurrent use.
type ranks struct {
	workers  []*Worker
	mu       sync.Mutex // guards inflight, last
	inflight []int      // requests handed to each rank and not yet finished
	last     int        // rank of the last balanced pick
}

func newRanks(ws []*Worker) *ranks {
	return &ranks{workers: ws, inflight: make([]int, len(ws)), last: len(ws) - 1} // the first pick is rank 0
}

// parseRankHeader reads X-data-parallel-rank as vLLM does: the first value, surrounding
// white space and a sign allowed; absent, or not an integer (Python's int() fails), means no
// rank (ok false). (Python also accepts digit-separating underscores; vllm-sim does not.)
func parseRankHeader(h http.Header) (rank int, ok bool) {
	vs := h.Values(HeaderDPRank)
	if len(vs) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(vs[0]))
	return n, err == nil
}

// pick chooses the rank of a request and counts it in flight until done(rank): the header's
// rank when it names one (out of range is ErrRankOutOfRange), else the least loaded rank, as
// vLLM's internal load balancer picks the engine with the fewest queued and running requests.
// Ties go round robin from the last balanced pick: vLLM counts a request it just sent until
// the next engine stats update, so back-to-back requests on idle engines alternate (observed:
// docs/vllm-facts.md §f).
func (rk *ranks) pick(h http.Header) (int, error) {
	r, ok := parseRankHeader(h)
	if ok && (r < 0 || r >= len(rk.workers)) {
		return 0, ErrRankOutOfRange{Rank: r, Size: len(rk.workers)}
	}
	rk.mu.Lock()
	defer rk.mu.Unlock()
	if !ok {
		n := len(rk.inflight)
		r = (rk.last + 1) % n
		for i := 1; i < n; i++ {
			if c := (rk.last + 1 + i) % n; rk.inflight[c] < rk.inflight[r] {
				r = c
			}
		}
		rk.last = r
	}
	rk.inflight[r]++
	return r, nil
}

// done ends a request picked on rank r.
func (rk *ranks) done(r int) {
	rk.mu.Lock()
	rk.inflight[r]--
	rk.mu.Unlock()
}
