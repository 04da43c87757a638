"""ZMQ helpers for the fact probes: a SUB collector that keeps every raw
multipart message, and a DEALER replay client (design doc section 1.5)."""

import struct
import threading
import time

import msgspec
import zmq

END_SEQ = b"\xff" * 8


def decode(payload):
    """Generic msgpack decode (no schema), bytes kept as bytes."""
    return msgspec.msgpack.decode(payload)


class Collector:
    """SUB socket that connects to tcp://127.0.0.1:port and records
    (t_monotonic, frames) for every message, in order."""

    def __init__(self, port, topic=b"", host="127.0.0.1"):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        self.sock.connect(f"tcp://{host}:{port}")
        self.msgs = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(100):
                frames = self.sock.recv_multipart()
                with self._lock:
                    self.msgs.append((time.monotonic(), frames))

    def mark(self):
        with self._lock:
            return len(self.msgs)

    def since(self, mark):
        with self._lock:
            return [f for _, f in self.msgs[mark:]]

    def wait_quiet(self, quiet=1.5, timeout=30):
        """Wait until no message has arrived for `quiet` seconds."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with self._lock:
                last = self.msgs[-1][0] if self.msgs else t0
            if time.monotonic() - max(last, t0) >= quiet:
                return
            time.sleep(0.1)

    def close(self):
        self._stop.set()
        self._t.join()
        self.sock.close(linger=0)


def seq_of(frames):
    return struct.unpack(">Q", frames[1])[0] if len(frames) == 3 and len(frames[1]) == 8 else None


def replay(port, start_seq, host="127.0.0.1", idle_timeout=2.0, total_timeout=30.0, raw_request=None):
    """Send ["", start_seq(8B BE)] from a DEALER; return the list of reply
    messages (each a list of frames, as the DEALER sees them) up to and
    including the end marker, and whether the end marker was seen."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://{host}:{port}")
    try:
        s.send_multipart(raw_request if raw_request is not None else [b"", struct.pack(">Q", start_seq)])
        out, ended = [], False
        t0 = time.monotonic()
        while time.monotonic() - t0 < total_timeout:
            if not s.poll(int(idle_timeout * 1000)):
                break
            frames = s.recv_multipart()
            out.append(frames)
            body = frames[1:] if frames and frames[0] == b"" else frames
            if (len(body) >= 2 and body[-2] == END_SEQ) or (body and body[-1] == b""):
                ended = True
                break
        return out, ended
    finally:
        s.close()
