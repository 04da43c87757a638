# Renders the /metrics text of SGLang's own scheduler metrics collector (sglang==0.5.23), as its
# HTTP server exposes it, for pool's scrape tests. Run with a Python that has sglang installed
# (--no-deps, see kvevents/testdata/gen_publishers.py for the list):
#   python gen_sglang_metrics.py OUT_DIR MODEL_DIR
import os
import subprocess
import sys

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest

from sglang.srt.observability.metrics_collector import QueueCount, SchedulerMetricsCollector, SchedulerStats


import sglang.srt.runtime_context as runtime_context
from sglang.srt.server_args import ServerArgs

# A scheduler process's published configuration, as SGLang's launcher publishes it, for a model
# directory holding the Qwen3 tokenizer files and a Qwen3 config.json (argv[2]).
SERVER_ARGS = ServerArgs(model_path=sys.argv[2], skip_tokenizer_init=True, device="cpu", enable_metrics=True, page_size=16)
runtime_context.publish(SERVER_ARGS, role="scheduler")


def render(name, ranks, priority):
    reg = CollectorRegistry()
    labels = {"model_name": "Qwen/Qwen3-8B", "engine_type": "unified", "tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}
    if priority:
        labels["priority"] = ""
    if ranks > 1:
        labels["dp_rank"] = 0
    def bound(cls):  # the collector's metric classes, registered on this page's registry
        return staticmethod(lambda *a, **kw: cls(*a, registry=reg, **kw))
    SchedulerMetricsCollector._gauge_cls = bound(prometheus_client.Gauge)
    SchedulerMetricsCollector._counter_cls = bound(prometheus_client.Counter)
    SchedulerMetricsCollector._histogram_cls = bound(prometheus_client.Histogram)
    SchedulerMetricsCollector._summary_cls = bound(prometheus_client.Summary)
    c = SchedulerMetricsCollector(labels=labels, server_args=SERVER_ARGS)
    for rank in range(ranks):
        if ranks > 1:
            c.labels = dict(labels, dp_rank=rank)  # the label set rank `rank`'s scheduler logs under
        c.emit_constants(max_total_num_tokens=640000, max_total_num_tokens_swa=None, weight_memory_usage_gb=16.0,
                         kv_cache_memory_usage_gb=50.0, graph_memory_usage_gb={}, max_running_requests_under_SLO=None,
                         page_size=16, num_pages=40000, context_len=40960, startup_available_gpu_memory_gb=70.0)
        by = {0: 5 + rank, 1: 2} if priority else None
        st = SchedulerStats(num_running_reqs=QueueCount(total=7 + rank, by_priority=by),
                            num_queue_reqs=QueueCount(total=3 + rank, by_priority={0: 3 + rank} if priority else None),
                            token_usage=0.42 + 0.1 * rank)
        c.log_stats(st)
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(generate_latest(reg))


PAGES = {"sglang_metrics.txt": (1, False), "sglang_metrics_dp2_priority.txt": (2, True)}
if len(sys.argv) == 4:
    render(sys.argv[3], *PAGES[sys.argv[3]])
else:  # one process per page: SGLang registers some metrics on the process-wide registry
    for page in PAGES:
        subprocess.run([sys.executable, __file__, sys.argv[1], sys.argv[2], page], check=True)
