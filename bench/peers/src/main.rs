//! Dynamo side of condisagg's peer benchmark (`make bench-peers`).
//!
//! Reads one case written by `go run ./cmd/bench-peers -mode gen` (recorded vLLM KVEventBatch payloads per
//! worker, and a lookup set of prompts as token ids), feeds it to one of dynamo-kv-router's
//! indexes through the crate's public API, and prints one JSON line of measurements:
//!
//! - ingest: msgpack payload -> `zmq_wire::decode_event_batch` -> `ZmqEventNormalizer::normalize`
//!   (filters, computes the block hashes from the token ids) -> `into_router_event` -> apply;
//! - lookup: `find_matches(local block hashes, early_exit = false)`, hashes computed beforehand,
//!   per CPU time of the process (and wall time);
//! - index memory: glibc heap bytes in use after ingest minus before (mallinfo2, all arenas);
//! - peak RSS of the process (VmHWM).
//!
//! Usage: dynamo-peers --index radix|crtc|positional --events FILE --lookups FILE [--lookup-ms N]

use std::fs::File;
use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dynamo_kv_router::indexer::positional::{LevelIndex, SearchMode};
use dynamo_kv_router::indexer::{SyncIndexer, WorkerTask};
use dynamo_kv_router::protocols::{
    BlockHashOptions, LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
    compute_block_hash_for_seq,
};
use dynamo_kv_router::zmq_wire::{ZmqEventNormalizer, decode_event_batch};
use dynamo_kv_router::{ConcurrentRadixTreeCompressed, PositionalIndexer, RadixTree};
use rustc_hash::FxHashMap;

const EVENTS_MAGIC: &[u8; 8] = b"CDPEVT1\0";
const LOOKUPS_MAGIC: &[u8; 8] = b"CDPLKP1\0";
/// Jump size of the positional index, as Dynamo's own benchmarks and thread-pool examples use.
const POSITIONAL_JUMP: usize = 32;

struct Args {
    index: String,
    events: String,
    lookups: String,
    lookup_ms: u64,
}

fn parse_args() -> Args {
    let mut a = Args { index: String::new(), events: String::new(), lookups: String::new(), lookup_ms: 300 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| die(&format!("flag {flag} needs a value")));
        match flag.as_str() {
            "--index" => a.index = val,
            "--events" => a.events = val,
            "--lookups" => a.lookups = val,
            "--lookup-ms" => a.lookup_ms = val.parse().unwrap_or_else(|_| die("bad --lookup-ms")),
            _ => die(&format!("unknown flag {flag}")),
        }
    }
    if a.events.is_empty() || a.lookups.is_empty() {
        die("--events and --lookups are required");
    }
    a
}

fn die(msg: &str) -> ! {
    eprintln!("dynamo-peers: {msg}");
    std::process::exit(2)
}

/// One of the crate's indexes, driven the way its own wrappers drive it.
enum Index {
    Radix(RadixTree),
    Positional(PositionalIndexer, FxHashMap<WorkerWithDpRank, LevelIndex>),
    /// The concurrent compressed radix tree applies events on its own worker thread (as
    /// ThreadPoolIndexer runs it) and answers lookups on the caller's thread.
    Crtc(Arc<ConcurrentRadixTreeCompressed>, Option<flume::Sender<WorkerTask>>, Option<std::thread::JoinHandle<()>>),
}

impl Index {
    fn new(kind: &str) -> Index {
        match kind {
            "radix" => Index::Radix(RadixTree::new()),
            "positional" => Index::Positional(
                PositionalIndexer::new_with_mode(POSITIONAL_JUMP, SearchMode::Strided),
                FxHashMap::default(),
            ),
            "crtc" => {
                let tree = Arc::new(ConcurrentRadixTreeCompressed::new());
                let (tx, rx) = flume::bounded::<WorkerTask>(1024);
                let t = Arc::clone(&tree);
                let h = std::thread::spawn(move || {
                    if let Err(e) = t.worker(rx, None) {
                        eprintln!("dynamo-peers: crtc worker: {e}");
                    }
                });
                Index::Crtc(tree, Some(tx), Some(h))
            }
            _ => die(&format!("unknown --index {kind} (radix, crtc, positional)")),
        }
    }

    /// Applies one event and reports whether the index accepted it (the CRTC worker reports
    /// its own failures).
    fn apply(&mut self, ev: RouterEvent) -> bool {
        match self {
            Index::Radix(t) => report(t.apply_event(ev)),
            Index::Positional(p, wb) => report(p.apply_event(wb, ev, None)),
            Index::Crtc(_, tx, _) => {
                tx.as_ref().unwrap().send(WorkerTask::Event(ev)).expect("crtc worker gone");
                true
            }
        }
    }

    /// Waits until every event sent so far is applied.
    fn sync(&mut self) {
        if let Index::Crtc(_, tx, _) = self {
            // An empty Cleared-free barrier: the worker answers tasks in order, so the ack of an
            // event that changes nothing (a remove of an unknown hash) follows every earlier one.
            let (resp, rx) = tokio::sync::oneshot::channel();
            let ev = barrier_event();
            tx.as_ref().unwrap().send(WorkerTask::EventWithAck { event: ev, resp }).expect("crtc worker gone");
            let _ = rx.blocking_recv();
        }
    }

    fn find(&self, seq: &[LocalBlockHash], owned: Vec<LocalBlockHash>) -> OverlapScores {
        match self {
            Index::Radix(t) => t.find_matches(owned, false),
            Index::Positional(p, _) => SyncIndexer::find_matches(p, seq, false),
            Index::Crtc(t, _, _) => SyncIndexer::find_matches(t.as_ref(), seq, false),
        }
    }

    /// Whether find takes its sequence by value (then the harness clones it before the clock).
    fn needs_owned(&self) -> bool {
        matches!(self, Index::Radix(_))
    }

    fn close(&mut self) {
        if let Index::Crtc(_, tx, h) = self {
            drop(tx.take());
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}

/// Reports whether an event was applied; with DYNAMO_PEERS_DEBUG set, prints why not.
fn report<E: std::fmt::Debug>(r: Result<(), E>) -> bool {
    if let Err(e) = &r {
        if std::env::var_os("DYNAMO_PEERS_DEBUG").is_some() {
            eprintln!("dynamo-peers: event rejected: {e:?}");
        }
    }
    r.is_ok()
}

/// A BlockRemoved of a hash no worker holds, on worker u64::MAX: applying it changes nothing.
fn barrier_event() -> RouterEvent {
    use dynamo_kv_router::protocols::{ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheRemoveData};
    RouterEvent::new(
        u64::MAX,
        KvCacheEvent {
            event_id: 0,
            data: KvCacheEventData::Removed(KvCacheRemoveData { block_hashes: vec![ExternalSequenceBlockHash(1)] }),
            dp_rank: 0,
        },
    )
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn check_magic(r: &mut impl Read, want: &[u8; 8], path: &str) {
    let mut m = [0u8; 8];
    r.read_exact(&mut m).unwrap_or_else(|e| die(&format!("{path}: {e}")));
    if &m != want {
        die(&format!("{path}: not a bench-peers file"));
    }
}

/// Reads the lookup set one prompt at a time and returns each prompt's local block hashes,
/// computed as Dynamo's router does for a request.
fn read_lookups(path: &str) -> Vec<Vec<LocalBlockHash>> {
    let mut r = BufReader::new(File::open(path).unwrap_or_else(|e| die(&format!("{path}: {e}"))));
    check_magic(&mut r, LOOKUPS_MAGIC, path);
    let bs = read_u32(&mut r).unwrap();
    let n = read_u32(&mut r).unwrap() as usize;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let nt = read_u32(&mut r).unwrap() as usize;
        let mut buf = vec![0u8; nt * 4];
        r.read_exact(&mut buf).unwrap();
        let tokens: Vec<u32> = buf.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        out.push(compute_block_hash_for_seq(&tokens, bs, BlockHashOptions::default()));
    }
    out
}

fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads glibc's allocator statistics.
    let mi = unsafe { libc::mallinfo2() };
    (mi.uordblks + mi.hblkhd) as u64
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn peak_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

struct Ingest {
    wall: Duration,
    cpu: Duration,
    batches: u64,
    events: u64,
    filtered: u64,
    rejected: u64,
    pairs: u64,
}

fn ingest(ix: &mut Index, path: &str) -> Ingest {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path).unwrap_or_else(|e| die(&format!("{path}: {e}"))));
    check_magic(&mut r, EVENTS_MAGIC, path);
    let workers = read_u32(&mut r).unwrap() as usize;
    let bs = read_u32(&mut r).unwrap();
    let pairs = read_u64(&mut r).unwrap();
    let batches = read_u64(&mut r).unwrap();
    let mut norm: Vec<ZmqEventNormalizer> = (0..workers).map(|_| ZmqEventNormalizer::new(bs)).collect();
    let mut next_id = vec![0u64; workers];
    let mut payload = Vec::new();
    let mut st = Ingest { wall: Duration::ZERO, cpu: Duration::ZERO, batches, events: 0, filtered: 0, rejected: 0, pairs };
    let cpu0 = cpu_time();
    for _ in 0..batches {
        let w = read_u32(&mut r).unwrap() as usize;
        let n = read_u32(&mut r).unwrap() as usize;
        payload.resize(n, 0);
        r.read_exact(&mut payload).unwrap();
        let t0 = Instant::now();
        let batch = decode_event_batch(&payload).unwrap_or_else(|e| die(&format!("decode batch: {e}")));
        let worker = WorkerWithDpRank::from_worker_id(w as u64);
        for raw in batch.events {
            st.events += 1;
            let id = next_id[w];
            next_id[w] += 1;
            match norm[w].normalize(raw, id, worker).and_then(|p| p.into_router_event()) {
                Some(ev) => {
                    if !ix.apply(ev) {
                        st.rejected += 1;
                    }
                }
                None => st.filtered += 1,
            }
        }
        st.wall += t0.elapsed();
    }
    let t0 = Instant::now();
    ix.sync();
    st.wall += t0.elapsed();
    st.cpu = cpu_time() - cpu0;
    st
}

fn main() {
    let a = parse_args();
    let seqs = read_lookups(&a.lookups);
    let lookup_blocks: usize = seqs.iter().map(Vec::len).sum();

    let heap0 = heap_in_use();
    let mut ix = Index::new(&a.index);
    let ing = ingest(&mut ix, &a.events);
    let heap1 = heap_in_use();

    // Checksum: the summed scores and the (lookup, worker) pairs with a match, which the driver
    // compares with condisagg's on the same files.
    let (mut score_sum, mut hits) = (0u64, 0u64);
    for s in &seqs {
        let sc = ix.find(s, s.clone());
        hits += sc.scores.len() as u64;
        score_sum += sc.scores.values().map(|&v| v as u64).sum::<u64>();
    }

    let budget = Duration::from_millis(a.lookup_ms);
    let (mut rounds, mut spent) = (0u64, Duration::ZERO);
    let mut sink = 0usize;
    let cpu0 = cpu_time();
    while rounds == 0 || spent < budget {
        let owned: Vec<Vec<LocalBlockHash>> =
            if ix.needs_owned() { seqs.iter().cloned().collect() } else { Vec::new() };
        let mut owned = owned.into_iter();
        let t0 = Instant::now();
        for s in &seqs {
            let o = owned.next().unwrap_or_default();
            sink += ix.find(s, o).scores.len();
        }
        spent += t0.elapsed();
        rounds += 1;
    }
    let lookup_cpu = cpu_time() - cpu0;
    std::hint::black_box(sink);
    ix.close();

    let n_lookups = rounds * seqs.len() as u64;
    println!(
        "{{\"impl\":\"dynamo-{}\",\"batches\":{},\"events\":{},\"filtered\":{},\"rejected\":{},\"pairs\":{},\
\"ingest_wall_s\":{:.6},\"ingest_cpu_s\":{:.6},\"index_bytes\":{},\"lookups\":{},\"lookup_blocks\":{},\
\"lookup_ns\":{:.1},\"lookup_wall_ns\":{:.1},\"score_sum\":{},\"hits\":{},\"peak_rss_kb\":{}}}",
        a.index,
        ing.batches,
        ing.events,
        ing.filtered,
        ing.rejected,
        ing.pairs,
        ing.wall.as_secs_f64(),
        ing.cpu.as_secs_f64(),
        heap1.saturating_sub(heap0),
        seqs.len(),
        lookup_blocks,
        lookup_cpu.as_nanos() as f64 / n_lookups as f64,
        spent.as_nanos() as f64 / n_lookups as f64,
        score_sum,
        hits,
        peak_rss_kb(),
    );
}
