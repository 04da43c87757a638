"""Start and stop one real vLLM engine (scripts/vllm-engine.sh) for the fact probes.

Used as a library by the other probes in this directory, and as a tool:

    .cache/vllm-venv/bin/python scripts/vllmfacts/engine.py --model .cache/models/tiny-qwen3 [--keep]

which starts the engine, reports the time until GET /health answers 200 and the
peak resident memory of the whole process tree (API server, EngineCore and
worker processes), then stops it (unless --keep).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAUNCHER = os.path.join(REPO, "scripts", "vllm-engine.sh")


def tree_rss(proc):
    """Sum of RSS (bytes) of a process and all its descendants."""
    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


class Engine:
    """One engine process tree, started in its own process group."""

    def __init__(self, model, port=18100, kv_port=15557, replay_port=15567, blocks=128,
                 max_model_len=2048, topic="kv-events", extra=(), log_path=None, env=None, opt_level=0, buffer_steps=None):
        self.port, self.kv_port, self.replay_port = port, kv_port, replay_port
        self.topic = topic
        self.args = [LAUNCHER, "--model", model, "--port", str(port), "--kv-port", str(kv_port),
                     "--replay-port", str(replay_port), "--blocks", str(blocks),
                     "--max-model-len", str(max_model_len), "--topic", topic, "--opt-level", str(opt_level)]
        if buffer_steps is not None:
            self.args += ["--buffer-steps", str(buffer_steps)]
        if extra:
            self.args += ["--", *extra]
        self.log_path = log_path or os.path.join(REPO, ".cache", "logs", f"engine-{port}.log")
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.peak_rss = 0
        self.startup_s = None
        self._stop_sampling = threading.Event()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=600):
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "w")
        t0 = time.monotonic()
        # From the repository root, so that paths given relative to it (the LoRA adapter of
        # probe_lora.py, which vLLM hashes as given) mean the same on every machine.
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=self.env, cwd=REPO)
        self._ps = psutil.Process(self.proc.pid)
        threading.Thread(target=self._sample, daemon=True).start()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.startup_s = time.monotonic() - t0
                        return self
            except Exception:
                pass
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"engine not healthy after {timeout}s; see {self.log_path}")

    def _sample(self):
        while not self._stop_sampling.is_set():
            self.peak_rss = max(self.peak_rss, tree_rss(self._ps))
            self._stop_sampling.wait(0.5)

    def stop(self, timeout=60):
        """SIGTERM to the launcher's process group, SIGKILL after timeout."""
        if self.proc is None:
            return
        self._stop_sampling.set()
        pgid = self.proc.pid  # start_new_session: the group id is the launcher's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait()
        # Any straggler of the same group.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- HTTP helpers -------------------------------------------------------
    def post(self, path, body, timeout=300):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def get(self, path, timeout=30):
        with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
            raw = r.read()
            ctype = r.headers.get("Content-Type", "")
            return r.status, (json.loads(raw) if "json" in ctype else raw.decode())

    def model_id(self):
        return self.get("/v1/models")[1]["data"][0]["id"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=18100)
    ap.add_argument("--keep", action="store_true", help="leave it running (prints the pid)")
    ap.add_argument("--opt-level", type=int, default=0, help="vLLM -O level (launcher default 0)")
    ap.add_argument("extra", nargs="*", help="extra vLLM flags (after --)")
    a = ap.parse_args()
    e = Engine(a.model, port=a.port, extra=a.extra, opt_level=a.opt_level)
    e.start()
    time.sleep(3)  # let the sampler see the settled tree
    out = {"startup_s": round(e.startup_s, 1), "peak_rss_gib": round(e.peak_rss / 2**30, 2),
           "rss_now_gib": round(tree_rss(e._ps) / 2**30, 2),
           "processes": [(p.pid, p.name(), round(p.memory_info().rss / 2**30, 2))
                         for p in [e._ps] + e._ps.children(recursive=True)]}
    if a.keep:
        out["pid"] = e.proc.pid
        print(json.dumps(out))
        return
    e.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
