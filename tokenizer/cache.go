package tokenizer

import (
	"strings"
	"sync"
)

const (
	// minCachedSegmentBytes: shorter segments are cheaper to encode than to look up.
	minCachedSegmentBytes = 16
	defaultCacheBytes     = 64 << 20
	// entryOverheadBytes approximates the map, list and slice headers of one entry.
	entryOverheadBytes = 96
)

// segmentCache maps the text between two added tokens (a segment, which
// tokenizes independently of its neighbours) to its ids. Multi-turn
// conversations resend the same segments, so turn N+1 only encodes what is new.
// It is bounded in entries and bytes and evicts least recently used first.
type segmentCache struct {
	maxEntries int
	maxBytes   int

	mu    sync.Mutex // guards items, head, bytes, stats
	items map[string]*cacheEntry
	head  cacheEntry // sentinel of the LRU ring: head.next is the most recent
	bytes int
	stats CacheStats
}

type cacheEntry struct {
	key        string
	ids        []uint32
	prev, next *cacheEntry
}

// CacheStats reports the segment cache's counters.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	Entries, Bytes          int
}

func newSegmentCache(maxEntries, maxBytes int) *segmentCache {
	if maxBytes <= 0 {
		maxBytes = defaultCacheBytes
	}
	c := &segmentCache{maxEntries: maxEntries, maxBytes: maxBytes, items: make(map[string]*cacheEntry)}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

func entryBytes(key string, ids []uint32) int { return len(key) + 4*len(ids) + entryOverheadBytes }

// encode appends the ids of one segment, from the cache when present. The
// caller never passes a segment whose ids depend on its position.
func (c *segmentCache) encode(dst []uint32, text string, t *Tokenizer, sc *encodeScratch) []uint32 {
	if len(text) < minCachedSegmentBytes {
		return t.encodeSegment(dst, text, false, sc)
	}
	c.mu.Lock()
	if e, ok := c.items[text]; ok {
		c.unlink(e)
		c.pushFront(e)
		c.stats.Hits++
		dst = append(dst, e.ids...)
		c.mu.Unlock()
		return dst
	}
	c.stats.Misses++
	c.mu.Unlock()

	n := len(dst)
	dst = t.encodeSegment(dst, text, false, sc)
	if t.budget != nil && t.budget.err != nil {
		return dst // cut short: not the segment's ids
	}
	ids := append([]uint32(nil), dst[n:]...)
	size := entryBytes(text, ids)
	if size > c.maxBytes {
		return dst
	}
	key := strings.Clone(text) // do not pin the caller's larger string
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; ok {
		return dst
	}
	e := &cacheEntry{key: key, ids: ids}
	c.items[key] = e
	c.pushFront(e)
	c.bytes += size
	for len(c.items) > c.maxEntries || c.bytes > c.maxBytes {
		c.evictOldest()
	}
	return dst
}

func (c *segmentCache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *segmentCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

func (c *segmentCache) evictOldest() {
	e := c.head.prev
	if e == &c.head {
		return
	}
	c.unlink(e)
	delete(c.items, e.key)
	c.bytes -= entryBytes(e.key, e.ids)
	c.stats.Evictions++
}

func (c *segmentCache) snapshot() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries, s.Bytes = len(c.items), c.bytes
	return s
}

// CacheStats returns the segment cache counters; all zero when the cache is off.
func (t *Tokenizer) CacheStats() CacheStats {
	if t.cache == nil {
		return CacheStats{}
	}
	return t.cache.snapshot()
}
