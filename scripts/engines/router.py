"""condisagg serve as the engine drivers see it: start, SIGKILL, the last applied seq per worker
(`condisagg workers -o json`) and the overlap of a request (POST /debug/explain).

Standard library only, so every producer's venv can import it.
"""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Router:
    def __init__(self, binary, workdir, config_text, grpc, admin_grpc, admin_http):
        self.bin = binary
        self.workdir = workdir
        self.admin_grpc = f"127.0.0.1:{admin_grpc}"
        self.admin_http = f"127.0.0.1:{admin_http}"
        self.cfg = os.path.join(workdir, "condisagg.yaml")
        with open(self.cfg, "w") as f:
            f.write(config_text)
        self.proc = None
        self.starts = 0

    @staticmethod
    def ports():
        return free_port(), free_port(), free_port()

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.workdir, f"serve.{self.starts}.log"), "w")
        self.proc = subprocess.Popen([self.bin, "serve", "--config", self.cfg], stdout=log, stderr=log)
        deadline = time.time() + 180  # a loaded machine can take minutes to load the tokenizer
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"condisagg serve exited with {self.proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://{self.admin_http}/healthz", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        raise SystemExit("condisagg serve did not answer /healthz in 180 s")

    def kill(self):
        """SIGKILL: nothing is flushed, the next start learns the index from the replay alone."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def workers(self):
        out = subprocess.run([self.bin, "workers", "--addr", self.admin_grpc, "-o", "json"],
                             capture_output=True, text=True, check=True, timeout=30)
        return json.loads(out.stdout).get("workers", [])

    def wait_seq(self, want, timeout=20.0):
        """Waits until every worker id in want (id -> last published seq) has applied that seq."""
        deadline = time.time() + timeout
        while True:
            got = {}
            for w in self.workers():
                ev = w.get("events") or {}
                got[w["id"]] = int(ev["lastSeq"]) if ev.get("hasLastSeq") else None
            if all(got.get(k) == v for k, v in want.items()):
                return
            if time.time() > deadline:
                raise SystemExit(f"condisagg did not reach seqs {want} in {timeout} s (it has {got})")
            time.sleep(0.02)

    def explain(self, tokens, salt=None, model="base"):
        """Explain of a completions body of those token ids: the whole answer."""
        body = {"model": model, "prompt": tokens, "max_tokens": 1}
        if salt is not None:
            body["cache_salt"] = salt
        req = urllib.request.Request(f"http://{self.admin_http}/debug/explain?path=/v1/completions",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    @staticmethod
    def overlaps_of(doc):
        """{worker id: (gpu, cpu) blocks} of an Explain answer."""
        return {o["worker"]: (int(o.get("gpuBlocks", 0)), int(o.get("cpuBlocks", 0))) for o in doc.get("overlaps", [])}

    def overlaps(self, tokens, salt=None, model="base"):
        """Explain of a completions body of those token ids: {worker id: (gpu, cpu) blocks}."""
        return self.overlaps_of(self.explain(tokens, salt, model))
