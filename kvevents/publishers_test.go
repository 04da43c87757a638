package kvevents

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/condisagg/condisagg/kvindex"
)

// A stream recorded by testdata/gen_publishers.py from a real publisher: its messages in order,
// and after some of them the producer's own count of cached leading blocks per probe.
type publisherStream struct {
	Producer  string            `json:"producer"`
	Format    string            `json:"format"`
	Topic     string            `json:"topic"`
	Versions  map[string]string `json:"versions"`
	Stream    string            `json:"stream"`
	Eagle     bool              `json:"eagle"` // SGLang with EAGLE: bigram pages (kvindex.KeysBigram)
	BlockSize int               `json:"block_size"`
	Steps     []struct {
		Messages []string `json:"messages"`
		Label    string   `json:"label"`
		Probes   []struct {
			Name       string   `json:"name"`
			Tokens     []uint32 `json:"tokens"`
			Salt       *string  `json:"salt"`
			LoRA       *string  `json:"lora"`
			WantBlocks int      `json:"want_blocks"`
		} `json:"probes"`
	} `json:"steps"`
}

func loadPublisherStreams(t *testing.T) []publisherStream {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "publishers", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []publisherStream
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s publisherStream
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, s)
	}
	// Both producers, both SGLang formats, SGLang with EAGLE: a lost file must not pass as fewer
	// streams.
	if len(out) != 4 {
		t.Fatalf("found %d recorded publisher streams, want 4 (sglang_default, sglang_dynamo, sglang_eagle, dynamo_trtllm)", len(out))
	}
	return out
}

func readFrames(t *testing.T, name string) [][]byte {
	t.Helper()
	var frames [][]byte
	for _, part := range []string{"topic", "seq", "payload"} {
		b, err := os.ReadFile(filepath.Join("testdata", "publishers", name+"."+part+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	return frames
}

// TestPublisherStreams replays every recorded stream into an Applier and checks, after each
// step, that condisagg's overlap for every probe (keyed as the router keys a request, cache_salt
// included) equals the producer's own count of cached blocks.
func TestPublisherStreams(t *testing.T) {
	for _, s := range loadPublisherStreams(t) {
		t.Run(s.Stream, func(t *testing.T) {
			keys := kvindex.KeysPlain
			if s.Eagle {
				keys = kvindex.KeysBigram
			}
			e := newApplyEnvKeys(t, s.BlockSize, 0, keys)
			var seq uint64
			probes := 0
			for _, st := range s.Steps {
				for _, name := range st.Messages {
					frames := readFrames(t, name)
					gotSeq, payload, reason := ParseLive(frames, DefaultMaxPayloadBytes)
					if reason != "" || string(frames[0]) != s.Topic {
						t.Fatalf("%s: topic %q, dropped as %q", name, frames[0], reason)
					}
					if gotSeq != seq {
						t.Fatalf("%s: seq %d, want %d", name, gotSeq, seq)
					}
					seq++
					if err := e.app.ApplyPayload(payload); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if err := e.app.MalformedEvent(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
				for _, p := range st.Probes {
					var salt []byte
					if p.Salt != nil {
						salt = []byte(*p.Salt)
					}
					var lora []byte
					if p.LoRA != nil {
						lora = []byte(*p.LoRA)
					}
					var out kvindex.Overlaps
					e.ix.Overlap(keys.AppendRequestKeys(nil, p.Tokens, s.BlockSize, lora, salt), &out)
					got := 0
					for _, w := range out.Workers {
						if w.Worker == "w0" {
							got = w.GPU
						}
					}
					if st.Label == "salted A stored" && (p.Name == "A/tenant-a" && p.WantBlocks != 6 || p.Name == "A/none" && p.WantBlocks != 0) {
						// The case the recording exists for: a salted prompt of 6 blocks is cached
						// for its salt only. A producer that said otherwise changed its semantics.
						t.Errorf("%s says probe %s after %q has %d blocks cached; the recording expects 6 for the salt, 0 without", s.Producer, p.Name, st.Label, p.WantBlocks)
					}
					if got != p.WantBlocks {
						t.Errorf("after %q: probe %s: condisagg credits %d blocks, %s says %d", st.Label, p.Name, got, s.Producer, p.WantBlocks)
					}
					probes++
				}
			}
			if probes == 0 {
				t.Fatal("no probes")
			}
			for _, reason := range []string{"malformed_event", "parent_not_found", "excluded_chain", "block_size_mismatch", "token_mismatch", "key_scheme_mismatch"} {
				if n := e.skipped(reason); n != 0 {
					t.Errorf("%v events skipped as %s", n, reason)
				}
			}
		})
	}
}

// TestPublisherSaltDecoded checks that the first store of each recorded stream, the salted
// request's, decodes with its top-level cache_salt, and an unsalted one with none.
func TestPublisherSaltDecoded(t *testing.T) {
	for _, s := range loadPublisherStreams(t) {
		var b Batch
		first := 0
		if s.Eagle {
			// The EAGLE stream starts with the two unsalted stores of its sequence-end probes:
			// E (4 pages, 64 tokens) caches 3 pages, whose 48 pairs are 49 tokens.
			if err := DecodeBatch(readFrames(t, s.Stream+".000")[2], &b); err != nil {
				t.Fatal(err)
			}
			if ev := b.Events; len(ev) != 1 || !ev[0].Bigram || len(ev[0].Hashes) != 3 || len(ev[0].Tokens) != 49 {
				t.Errorf("%s: first event %+v, want a BlockStored of 3 bigram pages (49 tokens)", s.Stream, ev)
			}
			first = 2
		}
		if err := DecodeBatch(readFrames(t, fmt.Sprintf("%s.%03d", s.Stream, first))[2], &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 1 || b.Events[0].Kind != KindBlockStored || string(b.Events[0].Salt) != "tenant-a" || b.Events[0].HasParent {
			t.Errorf("%s: first event %+v, want a root BlockStored with salt tenant-a", s.Stream, b.Events)
		}
		if err := DecodeBatch(readFrames(t, fmt.Sprintf("%s.%03d", s.Stream, first+1))[2], &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 1 || b.Events[0].Salt != nil {
			t.Errorf("%s: second event %+v, want an unsalted BlockStored", s.Stream, b.Events)
		}
	}
}

// TestPublisherKeySchemeMismatch applies SGLang's EAGLE stream to a model with plain keys and
// its plain stream to a model with bigram keys: every store is refused (key_scheme_mismatch),
// nothing is credited, and the applier's report names the setting to change.
func TestPublisherKeySchemeMismatch(t *testing.T) {
	for _, c := range []struct {
		stream string
		keys   kvindex.KeyScheme
		want   string
	}{
		{"sglang_eagle", kvindex.KeysPlain, "set speculative: eagle on the model"},
		{"sglang_default", kvindex.KeysBigram, "remove speculative: eagle from the model"},
	} {
		e := newApplyEnvKeys(t, 16, 0, c.keys)
		reported := ""
		for i := 0; ; i++ {
			name := fmt.Sprintf("%s.%03d", c.stream, i)
			if _, err := os.Stat(filepath.Join("testdata", "publishers", name+".payload.bin")); err != nil {
				break
			}
			if err := e.app.ApplyPayload(readFrames(t, name)[2]); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := e.app.KeySchemeMismatch(); err != nil && reported == "" {
				reported = err.Error()
			}
		}
		if n := e.skipped("key_scheme_mismatch"); n == 0 || e.blocks(kvindex.GPU) != 0 {
			t.Errorf("%s into %s keys: %v stores refused, %d blocks indexed; want every store refused", c.stream, c.keys, n, e.blocks(kvindex.GPU))
		}
		if !strings.Contains(reported, c.want) {
			t.Errorf("%s into %s keys: report %q lacks %q", c.stream, c.keys, reported, c.want)
		}
	}
}
