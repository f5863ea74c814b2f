"""tests/serverlib.py - start bin/mor-server and talk HTTP to it (stdlib only),
for tests/test_server*.py.

    srv = Server(["--slots", "4"])          # bin/mor-server -m models/brown-mor.gguf --port 0 ...
    status, headers, body = srv.request("POST", "/v1/completions", {"prompt": "Hi"})
    events = srv.stream("/v1/completions", {"prompt": "Hi", "stream": True})
    rc = srv.stop()                          # SIGTERM, wait; the exit status

Servers listen on 127.0.0.1 only, on a port the kernel picks (--port 0; the
server prints it).
"""
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import time

import testlib as t

MODEL = os.path.join(t.ROOT, "models", "brown-mor.gguf")
BIN = os.path.join(t.OUT, "bin", "mor-server")
RUN = os.path.join(t.OUT, "bin", "mor-run")
# sanitizer builds are several times slower
SLOW = 4 if os.environ.get("SANITIZE") == "1" else 1


class Server:
    def __init__(self, args=(), model=MODEL, log=None):
        self.log_path = log or os.path.join(t.OUT, "build", "test-logs", "mor-server-%d.log" % id(self))
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "wb")
        cmd = [BIN, "-m", model, "--host", "127.0.0.1", "--port", "0"] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, bufsize=0)
        line = b""
        deadline = time.time() + 30 * SLOW
        while not line.endswith(b"\n") and time.time() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if r:
                ch = self.proc.stdout.read(1)
                if not ch:
                    break
                line += ch
        if not line.startswith(b"listening on "):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("mor-server did not start: %r; log %s" % (line, self.log_path))
        self.host, port = line.split()[-1].decode().rsplit(":", 1)
        self.port = int(port)

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout * SLOW)

    def request(self, method, path, body=None, headers=None, conn=None):
        """(status, headers dict (lower-case names), body bytes); body: a
        dict (sent as JSON), bytes or str."""
        c = conn or self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hd = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        return r.status, hd, data

    def json(self, method, path, body=None, **kw):
        status, _, data = self.request(method, path, body, **kw)
        return status, json.loads(data)

    def stream(self, path, body):
        """The events of a streamed response: a list of parsed JSON objects,
        then the string "[DONE]"; (status, events)."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            data = r.read()
            c.close()
            return r.status, [json.loads(data)]
        events = parse_sse(r.read().decode())
        c.close()
        return r.status, events

    def raw(self, data, timeout=10, until_close=True):
        """Send bytes on a new connection, return what comes back until the
        server closes (or the timeout)."""
        s = socket.create_connection((self.host, self.port), timeout=timeout * SLOW)
        s.sendall(data)
        out = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
                if not until_close and b"\r\n\r\n" in out:
                    break
        except socket.timeout:
            pass
        s.close()
        return out

    def metric(self, name):
        """The value of one Prometheus sample ("mor_slots_busy",
        'mor_requests_total{finish_reason="cancelled"}')."""
        _, _, data = self.request("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        return rc

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def parse_sse(text):
    events = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block[6:]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def mor_run(prompt, n, seed, extra=(), model=MODEL):
    """bin/mor-run's generated ids, text and show-depth output for a text
    prompt: the flags are named in full so that the comparison does not
    depend on mor-run's defaults."""
    flags = ["-m", model, "-p", prompt, "-n", str(n), "--seed", str(seed), "--routing", "threshold",
             "--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", "-q"] + list(extra)
    ids = subprocess.run([RUN] + flags + ["--print-ids"], capture_output=True, check=True).stdout.split()
    shown = subprocess.run([RUN] + flags + ["--show-depth"], capture_output=True, check=True).stdout
    return [int(x) for x in ids], shown, flags
