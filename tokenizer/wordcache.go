package tokenizer

import "sync"

const (
	wordCacheShards = 16
	// wordCacheMaxWordBytes: longer words are not cached (Hugging Face uses 256 chars).
	wordCacheMaxWordBytes = 256
	// wordCachePerShard bounds each shard; a full shard is cleared.
	wordCachePerShard = 4096
)

// wordCache remembers the ids of recently seen words, as Hugging Face's BPE
// does; common words then skip the merge loop. Bounded to
// wordCacheShards*wordCachePerShard words.
type wordCache struct {
	shards [wordCacheShards]wordShard
}

type wordShard struct {
	mu sync.RWMutex // guards m
	m  map[string][]uint32
}

func shardOf(w string) int {
	h := uint(len(w))*0x9E37 ^ uint(w[0])*31 ^ uint(w[len(w)-1])*131
	return int(h % wordCacheShards)
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	s := &c.shards[shardOf(w)]
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	s := &c.shards[shardOf(w)]
	s.mu.Lock()
	if s.m == nil || len(s.m) >= wordCachePerShard {
		s.m = make(map[string][]uint32, wordCachePerShard/4)
	}
	s.m[w] = ids
	s.mu.Unlock()
}
