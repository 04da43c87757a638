package kvindex

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// dynamoKeyCases is testdata/dynamo_block_hashes.json, written by testdata/gen_dynamo_keys.py
// from Dynamo's compiled compute_block_hash_for_seq.
type dynamoKeyCases struct {
	Producer string            `json:"producer"`
	Versions map[string]string `json:"versions"`
	Cases    []struct {
		BlockSize int      `json:"block_size"`
		LoRA      *string  `json:"lora"`
		Tokens    []uint32 `json:"tokens"`
		Hashes    []string `json:"hashes"`
	} `json:"cases"`
}

// TestDynamoBlockHashes checks condisagg's local block hash, the value every router key is
// chained from, against Dynamo's own key function on random sequences: block sizes 1 to 64,
// token ids over the whole uint32 range, base model and LoRA adapters (Dynamo seeds an
// adapter's blocks as condisagg does, vllm-kv-events.md §4.1). CONDISAGG_DYNAMO_KEYS names
// another file of the same shape (make conformance-engines writes a fresh one).
func TestDynamoBlockHashes(t *testing.T) {
	path := filepath.Join("testdata", "dynamo_block_hashes.json")
	if p := os.Getenv("CONDISAGG_DYNAMO_KEYS"); p != "" {
		path = p
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc dynamoKeyCases
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(doc.Cases) < 100 {
		t.Fatalf("%s: %d cases, want at least 100", path, len(doc.Cases))
	}
	blocks, lora, sizes := 0, 0, map[int]bool{}
	for i, c := range doc.Cases {
		var name []byte
		if c.LoRA != nil {
			name = []byte(*c.LoRA)
			lora++
		}
		sizes[c.BlockSize] = true
		if want := len(c.Tokens) / c.BlockSize; len(c.Hashes) != want {
			t.Fatalf("case %d: %d hashes for %d tokens at block size %d", i, len(c.Hashes), len(c.Tokens), c.BlockSize)
		}
		seed := LoRASeed(name)
		for b, s := range c.Hashes {
			want, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("case %d block %d: %v", i, b, err)
			}
			if got := localHash(c.Tokens[b*c.BlockSize:(b+1)*c.BlockSize], seed); got != want {
				t.Errorf("case %d (block size %d, lora %q) block %d: condisagg %d, Dynamo %d", i, c.BlockSize, name, b, got, want)
			}
			blocks++
		}
	}
	// A file that lost its adapters or its spread of block sizes would pass on less.
	if lora == 0 || lora == len(doc.Cases) || len(sizes) < 20 || blocks < 500 {
		t.Fatalf("%s: %d cases with an adapter of %d, %d block sizes, %d blocks: too narrow", path, lora, len(doc.Cases), len(sizes), blocks)
	}
	t.Logf("%d cases (%d with an adapter), %d block sizes, %d blocks: all equal to %s %v", len(doc.Cases), lora, len(sizes), blocks, doc.Producer, doc.Versions)
}
