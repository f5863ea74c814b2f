"""tests/test_server_nginx.py - scale-out: two mor-server processes behind
nginx (Debian package nginx) with the repository's config
(examples/nginx/mor-server.conf, its ports changed), on loopback ports.
Requests go through nginx; both servers must answer; one server is stopped
in the middle of a run, gracefully (SIGTERM: it drains) and then hard
(SIGKILL: nginx retries its requests on the other), and no request may be
lost or differ from the same request served directly. Skipped (counted)
without nginx."""
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as t  # noqa: E402
import serverlib as sl  # noqa: E402

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_nginx(tmp, port, a, b):
    conf = open(os.path.join(t.ROOT, "examples", "nginx", "mor-server.conf")).read()
    conf, n1 = re.subn(r"listen 127\.0\.0\.1:8080;", "listen 127.0.0.1:%d;" % port, conf)
    conf, n2 = re.subn(r"server 127\.0\.0\.1:8081 ", "server 127.0.0.1:%d " % a, conf)
    conf, n3 = re.subn(r"server 127\.0\.0\.1:8082 ", "server 127.0.0.1:%d " % b, conf)
    assert n1 == n2 == n3 == 1, "the example config changed shape"
    if os.geteuid() == 0:
        conf = "user root;\n" + conf   # the workers may then write the prefix's temporary files
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    os.makedirs(os.path.join(tmp, "logs"), exist_ok=True)
    os.makedirs(os.path.join(tmp, "tmp"), exist_ok=True)
    p = subprocess.Popen([NGINX, "-p", tmp, "-c", path, "-g", "daemon off;"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "logs", "stderr.log"), "wb"))
    end = time.time() + 120 * sl.SLOW   # a bound only a broken nginx reaches
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("nginx did not start: " + open(os.path.join(tmp, "logs", "stderr.log")).read()[-500:] +
                       open(os.path.join(tmp, "logs", "error.log")).read()[-500:] if os.path.exists(
                           os.path.join(tmp, "logs", "error.log")) else "")


def post(port, body, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120 * sl.SLOW)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, r.getheader("X-Upstream") or "", data


def run(port, reqs, conc, on_done=None):
    """Send reqs through nginx, conc at a time: [(status, upstream, result)]."""
    out = [None] * len(reqs)
    done = [0]
    lock = threading.Lock()
    local = threading.local()

    def one(i):
        if not hasattr(local, "c"):
            local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120 * sl.SLOW)
        try:
            st, up, data = post(port, reqs[i], conn=local.c)
            res = json.loads(data)
            out[i] = (st, up, (res["choices"][0]["text"], res["choices"][0]["mor"]) if st == 200 else res)
        except (OSError, http.client.HTTPException, ValueError) as e:
            out[i] = ("exception", "", str(e))
            local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120 * sl.SLOW)
        with lock:
            done[0] += 1
            n = done[0]
        if on_done:
            on_done(n)
    with concurrent.futures.ThreadPoolExecutor(conc) as ex:
        list(ex.map(one, range(len(reqs))))
    return out


def main():
    if not NGINX:
        t.skip("scale-out behind nginx: nginx not found (Debian: apt-get install nginx)")
        t.finish()
    tmp = tempfile.mkdtemp(prefix="mornginx.")
    servers, nginx = [], None
    try:
        a = sl.Server(["--slots", "4", "-q"])
        b = sl.Server(["--slots", "4", "-q"])
        servers = [a, b]
        port = free_port()
        nginx = start_nginx(tmp, port, a.port, b.port)
        prompts = ["The jury said that", "In the morning", "He", "The city of"]
        reqs = [{"prompt": prompts[i % 4], "max_tokens": 16 + i % 9, "seed": 500 + i} for i in range(60)]
        # the answers, from one server directly
        ref = []
        for r in reqs:
            st, _, data = post(a.port, r)
            res = json.loads(data)
            ref.append((res["choices"][0]["text"], res["choices"][0]["mor"]))

        def check_run(out, what):
            errors = [o for o in out if o[0] != 200]
            same = sum(1 for o, w in zip(out, ref) if o[0] == 200 and o[2] == w)
            t.check(not errors, "%s: every request answered 200 through nginx (%d failed: %s)" %
                    (what, len(errors), errors[:2]))
            t.check(same == len(reqs), "%s: every answer equals the same request served directly (%d of %d)" %
                    (what, same, len(reqs)))
            return {o[1] for o in out if o[0] == 200}

        ups = check_run(run(port, reqs, 8), "two servers")
        t.check({"127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port} <= ups,
                "two servers: both answered (X-Upstream: %s)" % sorted(ups))

        # SIGTERM to one server after a third of the requests: it drains
        stopped = {}

        def stop_b(n):
            if n == 20 and "b" not in stopped:
                stopped["b"] = True
                b.proc.send_signal(signal.SIGTERM)
        ups = check_run(run(port, reqs, 8, stop_b), "one server drained by SIGTERM mid-run")
        rc = b.stop()
        t.check(rc == 0, "the drained server exited 0")
        t.check("127.0.0.1:%d" % a.port in ups, "the other server took over")

        # back, on its port; then SIGKILL the other one mid-run: nginx retries
        b = sl.Server(["--slots", "4", "-q", "--port", str(b.port)])
        servers[1] = b
        # nginx tries it again after fail_timeout (5 s); least_conn alternates
        # between idle servers. The bound is one only a broken setup reaches.
        end = time.time() + 120 * sl.SLOW
        seen = set()
        while time.time() < end and "127.0.0.1:%d" % b.port not in seen:
            seen.add(post(port, reqs[0])[1])
            time.sleep(0.2)
        t.check("127.0.0.1:%d" % b.port in seen, "the restarted server is back in the group")

        def kill_a(n):
            if n == 20 and "a" not in stopped:
                stopped["a"] = True
                a.proc.send_signal(signal.SIGKILL)
        ups = check_run(run(port, reqs, 8, kill_a), "one server killed (SIGKILL) mid-run")
        t.check("127.0.0.1:%d" % b.port in ups, "the other server took over its requests")
    finally:
        if nginx:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(20)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait()
        for s in servers:
            s.stop(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    t.finish()


if __name__ == "__main__":
    main()
