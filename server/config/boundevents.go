package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// BoundStream maps one topic of the bound KV event socket (router.kv_events_bind) to a worker
// and its data-parallel rank: publishers that dial out to the router (llm-d's inference
// simulator, an engine behind NAT) are told apart by their topic, not by an address.
type BoundStream struct {
	// Topic is the publisher's ZeroMQ topic (vLLM's kv-events-config "topic"; llm-d's
	// simulator sends "kv@<address>@<model>"). Matched exactly: messages of another topic are
	// dropped and counted (condisagg_kv_messages_dropped_total{worker="central", reason="unknown_topic"}).
	Topic string `yaml:"topic"`
	// Worker is the name of a static worker whose endpoint is an IP address (a DNS name may
	// stand for several engines, which cannot share one topic).
	Worker string `yaml:"worker"`
	// Rank is the data-parallel rank of the worker that publishes on Topic (< its
	// data_parallel_size).
	Rank int `yaml:"rank"`
	// KVReplay is the publisher's replay ROUTER (tcp://host:port), if it has one: gaps are
	// then replayed; without it a gap clears the worker's index entries.
	KVReplay string `yaml:"kv_replay"`
}

// BoundEvents is the validated bound socket: its endpoint and, per model (Config.Models order),
// the streams of that model's workers.
type BoundEvents struct {
	Endpoint string
	Streams  [][]BoundStream
}

// checkBindEndpoint is the rule of router.kv_events_bind: "" (off), tcp://ip:port or ipc://path.
func checkBindEndpoint(v any) string {
	s := v.(string)
	if s == "" {
		return ""
	}
	const rule = " must be tcp://ip:port (for example tcp://127.0.0.1:5557, or tcp://0.0.0.0:5557 to accept remote publishers) or ipc:///path"
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return strconv.Quote(s) + rule
	case u.Scheme == "ipc" && u.Path != "" && u.Host == "":
		return ""
	case u.Scheme != "tcp":
		return strconv.Quote(s) + rule
	}
	host, port := u.Hostname(), u.Port()
	if _, err := netip.ParseAddr(host); err != nil && host != "*" {
		return strconv.Quote(s) + rule + " (the host is the local address to bind: an IP or *)"
	}
	if !validPort(port) {
		return strconv.Quote(s) + rule + " (a port in [1, 65535])"
	}
	return ""
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536
}

// boundEvents validates router.kv_events_topics against the models' workers and groups the
// streams by model; nil when nothing is bound.
func boundEvents(fc *File, mfs []ModelFile, bad func(field string, value any, rule string)) *BoundEvents {
	bind, topics := fc.Router.KVEventsBind, fc.Router.KVEventsTopics
	switch {
	case bind == "" && len(topics) == 0:
		return nil
	case bind == "":
		bad("router.kv_events_topics", fmt.Sprintf("%d entries", len(topics)),
			"need router.kv_events_bind (--router-kv-events-bind), the endpoint the publishers dial")
		return nil
	case len(topics) == 0:
		bad("router.kv_events_bind", strconv.Quote(bind),
			"needs router.kv_events_topics: map each publisher's topic to its worker ({topic, worker, rank})")
		return nil
	}
	if !fc.Router.KVEvents {
		bad("router.kv_events_bind", strconv.Quote(bind), "needs router.kv_events: true (--router-kv-events)")
	}
	type ref struct {
		model int
		wc    int
	}
	byName := map[string]ref{}
	for i, m := range mfs {
		for j, w := range m.Workers {
			byName[w.Name] = ref{i, j}
		}
	}
	be := &BoundEvents{Endpoint: bind, Streams: make([][]BoundStream, len(mfs))}
	topicAt := map[string]int{}
	rankAt := map[string]int{}
	for i, t := range topics {
		f := "router.kv_events_topics[" + strconv.Itoa(i) + "]"
		if t.Topic == "" {
			bad(f+".topic", `""`, "must be the topic the worker's publisher sends (its kv-events-config topic)")
		} else if prev, ok := topicAt[t.Topic]; ok {
			bad(f+".topic", strconv.Quote(t.Topic), fmt.Sprintf("is already router.kv_events_topics[%d]; each publisher needs its own topic", prev))
		} else {
			topicAt[t.Topic] = i
		}
		r, ok := byName[t.Worker]
		if !ok {
			bad(f+".worker", strconv.Quote(t.Worker), "is not the name of a configured worker (workers[].name)")
			continue
		}
		w := mfs[r.model].Workers[r.wc]
		if host, _, err := splitHostPort(w.Endpoint); err == nil {
			if _, err := netip.ParseAddr(host); err != nil {
				bad(f+".worker", strconv.Quote(t.Worker), "has a DNS endpoint ("+w.Endpoint+"), which may stand for several engines: give the worker an IP endpoint")
			}
		}
		if w.KVEvents != "" {
			bad(f+".worker", strconv.Quote(t.Worker), "already subscribes to "+w.KVEvents+" (kv_events): a worker's events come either from its own PUB or from the bound socket, so remove one")
		}
		if n := max(w.DataParallelSize, 1); t.Rank < 0 || t.Rank >= n {
			bad(f+".rank", t.Rank, fmt.Sprintf("must be in [0, %d] (worker %s has data_parallel_size %d)", n-1, t.Worker, w.DataParallelSize))
		}
		key := t.Worker + "\x00" + strconv.Itoa(t.Rank)
		if prev, ok := rankAt[key]; ok {
			bad(f+".worker", fmt.Sprintf("%q rank %d", t.Worker, t.Rank), fmt.Sprintf("is already router.kv_events_topics[%d]; one topic per worker rank", prev))
		}
		rankAt[key] = i
		if t.KVReplay != "" {
			if u, err := url.Parse(t.KVReplay); err != nil || u.Scheme != "tcp" || !validPort(u.Port()) {
				bad(f+".kv_replay", strconv.Quote(t.KVReplay), "must be tcp://host:port (the publisher's replay ROUTER) or absent")
			}
		}
		be.Streams[r.model] = append(be.Streams[r.model], t)
	}
	return be
}

// splitHostPort splits host:port, tolerating bracketed IPv6.
func splitHostPort(hp string) (string, string, error) {
	i := strings.LastIndexByte(hp, ':')
	if i < 0 {
		return "", "", fmt.Errorf("%q has no port", hp)
	}
	return strings.Trim(hp[:i], "[]"), hp[i+1:], nil
}
