package route

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/condisagg/condisagg/policy"
)

// countingStreams is every stream connected, last stored long ago, counting the requests
// routed to each worker as the KV event adapter does.
type countingStreams struct {
	mu     sync.Mutex
	routed map[string]int
}

func (c *countingStreams) Stream(w string, now time.Time) policy.Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return policy.Stream{Connected: true, LastStored: now.Add(-time.Hour), RoutedSinceStored: c.routed[w]}
}

func (c *countingStreams) Routed(w string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routed[w]++
}

func (c *countingStreams) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.routed {
		n += v
	}
	return n
}

// TestSilenceCountsOnlyStoringRequests: the silence rule (conditional-disagg.md §8.3) counts
// requests routed to a worker since its last BlockStored; only a prompt with a full block the
// worker does not hold makes the engine store one, so only such requests count. Twenty prompts
// shorter than one block must not mark a healthy stream silent (issue 23 item 5).
func TestSilenceCountsOnlyStoringRequests(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		tokens    int
		wantCount bool
	}{
		{"prompt_shorter_than_one_block_is_not_counted", 15, false},
		{"prompt_with_a_full_block_is_counted", 17, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			streams := &countingStreams{routed: map[string]int{}}
			r, _ := testRouter(t, streams)
			for range policy.DefaultKVEventsMinRequests {
				if _, err := r.Decide(ctx, &Request{Endpoint: EndpointCompletions, Tokens: prompt(c.tokens)}); err != nil {
					t.Fatal(err)
				}
			}
			want := 0
			if c.wantCount {
				want = policy.DefaultKVEventsMinRequests
			}
			if got := streams.total(); got != want {
				t.Fatalf("%d routed requests counted towards silence; want %d", got, want)
			}
			if silent := r.UpdateSilence(time.Now(), map[string]bool{}).Changed; !c.wantCount && len(silent) != 0 {
				t.Fatalf("workers flagged silent after short prompts only: %v", silent)
			}
		})
	}
}

// TestDecideForAClientThatLeft: a request whose context has ended (the client went away) is
// neither decided nor booked, and says so with ErrCancelled (not an internal failure, which
// --failure-mode open would route and book).
func TestDecideForAClientThatLeft(t *testing.T) {
	r, p := testRouter(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Decide(ctx, &Request{Endpoint: EndpointCompletions, Tokens: prompt(4096)})
	if !errors.Is(err, ErrCancelled) || errors.Is(err, ErrInternal) {
		t.Fatalf("err = %v, want ErrCancelled", err)
	}
	for _, w := range p.Workers() {
		if w.ActiveRequests != 0 {
			t.Fatalf("worker %s has %d bookings", w.ID, w.ActiveRequests)
		}
	}
}
