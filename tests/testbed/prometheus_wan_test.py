#!/usr/bin/env python3
"""A real Prometheus (Debian's `prometheus`) scrapes the 6 ranks of a seed.toml run on the WAN
test bed; PromQL through its HTTP API must return the series docs/metrics.md promises, with
values that follow from the scenario and from what the allreduces moved.

Usage: prometheus_wan_test.py GEOCCL METRICS_RANK SCENARIO
Exit 0: pass; 77: skipped (not root, no prometheus); anything else: fail. Everything started
here (the job, its namespaces, Prometheus) is stopped on every path out.
"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

LARGE = 8 << 20  # bytes per large allreduce
ITERS = 5
SMALL, SMALL_ITERS = 4096, 20
RANKS, PER_DOMAIN = 6, 2
RTT_S = 0.020  # seed.toml


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def enter_netns(name):
    """Moves this process into network namespace `name` (where Prometheus listens)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open("/run/netns/" + name, os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        fail("setns %s: %s" % (name, os.strerror(ctypes.get_errno())))
    os.close(fd)


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        fail("query %s: %s" % (promql, body))
    return body["data"]["result"]


def values(port, promql):
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in query(port, promql)}


def scalar(port, promql):
    res = query(port, promql)
    if len(res) != 1:
        fail("%s: expected one series, got %s" % (promql, res))
    return float(res[0]["value"][1])


def free_port_range(n):
    """A base port b with b..b+n-1 free here, below the ephemeral range (32768-60999)."""
    import random
    import socket
    for _ in range(100):
        b = random.randrange(20000, 32000 - n)
        try:
            socks = []
            for p in range(b, b + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("0.0.0.0", p))
            return b
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    fail("no free port range")


def main():
    geoccl, rank_prog, scenario = sys.argv[1:4]
    if os.geteuid() != 0:
        print("SKIP: needs root (namespaces)")
        return 77
    prom = shutil.which("prometheus")
    if not prom:
        print("SKIP: no prometheus binary (apt-get install prometheus)")
        return 77
    tmp = tempfile.mkdtemp(prefix="geoccl-prom-")
    stop_file = os.path.join(tmp, "stop")
    base = free_port_range(RANKS + 1)
    job = prom_proc = None
    try:
        job = subprocess.Popen(
            [geoccl, "run", "--timeout", "90", "--wan", scenario, "--metrics", "--metrics-base-port", str(base),
             "--", rank_prog, stop_file, str(LARGE), str(ITERS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        endpoints, netns, done = {}, {}, set()
        deadline = time.time() + 60
        for line in job.stdout:
            sys.stdout.write("job: " + line)
            m = re.search(r"rank (\d+) metrics http://([\d.]+):(\d+)/metrics netns (\S+)", line)
            if m:
                endpoints[int(m.group(1))] = "%s:%s" % (m.group(2), m.group(3))
                netns[int(m.group(1))] = m.group(4)
            m = re.search(r"METRICS_RANK_DONE (\d+)", line)
            if m:
                done.add(int(m.group(1)))
                if len(done) == RANKS:
                    break
            if time.time() > deadline:
                fail("the job did not finish its allreduces in time")
        if len(done) != RANKS or len(endpoints) != RANKS:
            fail("job ended early (endpoints %s, done %s)" % (endpoints, done))
        # Keep draining the job's output so that it never blocks on a full pipe.
        import threading
        threading.Thread(target=lambda: [sys.stdout.write("job: " + l) for l in job.stdout], daemon=True).start()

        # Prometheus in domain a's namespace: it reaches a's ranks locally and the others across
        # the emulated WAN, like a per-region scraper would.
        enter_netns(netns[0])
        prom_port = base + RANKS  # in domain a's namespace, where nothing else listens
        targets = "\n".join(
            "      - targets: ['%s']\n        labels: {rank: '%d', domain: '%s'}" %
            (endpoints[r], r, "abc"[r // PER_DOMAIN]) for r in range(RANKS))
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
                    "scrape_configs:\n  - job_name: geoccl\n    static_configs:\n" + targets + "\n")
        prom_proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", prom, "--config.file=" + cfg,
             "--storage.tsdb.path=" + os.path.join(tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prometheus.log"), "w"))
        # Ready when every target has been scraped up twice (the second after all allreduces).
        deadline = time.time() + 25
        while True:
            try:
                up = values(prom_port, "count_over_time(up[1m]) >= 2 and up == 1")
                if len(up) == RANKS:
                    break
            except (OSError, ValueError):
                pass
            if prom_proc.poll() is not None:
                fail("prometheus exited: " + open(os.path.join(tmp, "prometheus.log")).read()[-2000:])
            if time.time() > deadline:
                fail("prometheus did not scrape all %d ranks: up=%s" % (RANKS, values(prom_port, "up")))
            time.sleep(0.3)

        # 1. Operation volume: exact.
        want_op = RANKS * (ITERS * LARGE + SMALL_ITERS * SMALL)
        got = scalar(prom_port, 'sum(geoccl_op_bytes_total{op="allreduce"})')
        print("sum(geoccl_op_bytes_total{op=\"allreduce\"}) =", got)
        if got != want_op:
            fail("op bytes %s, want %s" % (got, want_op))
        count = scalar(prom_port, 'sum(geoccl_op_duration_seconds_count{op="allreduce"})')
        if count != RANKS * (ITERS + SMALL_ITERS):
            fail("allreduce count %s" % count)
        # 2. RTT across domains near the scenario's 20 ms; none measured inside one (shared memory).
        cross = 'peer!~"%s"'
        for r in range(RANKS):
            mine = "|".join(str(p) for p in range(RANKS) if p // PER_DOMAIN == r // PER_DOMAIN)
            mins = values(prom_port, 'geoccl_peer_min_rtt_seconds{rank="%d",%s}' % (r, cross % mine))
            srtt = values(prom_port, 'geoccl_peer_rtt_seconds{rank="%d",transport="tcp"}' % r)
            if len(mins) != RANKS - PER_DOMAIN or len(srtt) != RANKS - PER_DOMAIN:
                fail("rank %d: RTT series %s %s" % (r, mins, srtt))
            print("rank %d: min RTT %s, smoothed RTT %s" % (r, sorted(round(v, 4) for v in mins.values()),
                                                           sorted(round(v, 4) for v in srtt.values())))
            for v in mins.values():
                if not RTT_S * 0.95 <= v <= RTT_S * 1.25:
                    fail("rank %d: min RTT %.4f s, scenario %.3f s" % (r, v, RTT_S))
            for v in srtt.values():
                if not RTT_S * 0.95 <= v <= RTT_S * 10:
                    fail("rank %d: smoothed RTT %.4f s" % (r, v))
        inter = scalar(prom_port, 'avg(geoccl_peer_min_rtt_seconds)')
        print("avg(geoccl_peer_min_rtt_seconds) =", inter)
        # 3. Bytes sent match what the hierarchical allreduce moves: per rank and 8 MiB call,
        # S/2 reduce-scattered inside the domain, 2(k-1)/k * S/2 across domains, S/2 gathered.
        k = RANKS // PER_DOMAIN
        wan_per_rank = ITERS * 2 * (k - 1) / k * LARGE / 2
        lan_per_rank = ITERS * LARGE
        for r in range(RANKS):
            mine = "|".join(str(p) for p in range(RANKS) if p // PER_DOMAIN == r // PER_DOMAIN)
            wan = scalar(prom_port, 'sum(geoccl_peer_bytes_sent_total{rank="%d",%s})' % (r, cross % mine))
            lan = scalar(prom_port, 'sum(geoccl_peer_bytes_sent_total{rank="%d",peer=~"%s"})' % (r, mine))
            # (0.5 % below: ring segments of 2^21 / 6 elements are uneven by an element or two.)
            if not wan_per_rank * 0.995 <= wan <= wan_per_rank * 1.05:
                fail("rank %d sent %d bytes across domains, the allreduces move %d" % (r, wan, wan_per_rank))
            if not lan_per_rank * 0.995 <= lan <= lan_per_rank * 1.05:
                fail("rank %d sent %d bytes inside its domain, the allreduces move %d" % (r, lan, lan_per_rank))
        sent = scalar(prom_port, "sum(geoccl_peer_bytes_sent_total)")
        recv = scalar(prom_port, "sum(geoccl_peer_bytes_received_total)")
        print("sum(geoccl_peer_bytes_sent_total) =", sent, " received =", recv)
        if abs(sent - recv) > 0.01 * sent:
            fail("bytes sent %d and received %d differ" % (sent, recv))
        # 4. The rest exists with sane values.
        util = values(prom_port, "geoccl_link_utilization_ratio")
        if len(util) != RANKS * (k - 1) or any(not 0 <= v <= 1.5 for v in util.values()):
            fail("utilization %s" % util)
        ratio = values(prom_port, 'geoccl_op_limit_ratio{op="allreduce"}')
        if len(ratio) != RANKS or any(not 0.8 <= v <= 50 for v in ratio.values()):
            fail("limit ratio %s" % ratio)
        for name in ("geoccl_peer_retransmits_total", "geoccl_stream_reconnects_total"):
            if len(values(prom_port, name)) != RANKS * (RANKS - 1):
                fail(name + " missing")
        rss = values(prom_port, "geoccl_process_resident_bytes")
        if len(rss) != RANKS or any(v < LARGE for v in rss.values()):
            fail("resident bytes %s" % rss)
        print("PASS")
        return 0
    finally:
        open(stop_file, "w").close()
        if prom_proc and prom_proc.poll() is None:
            prom_proc.terminate()
            try:
                prom_proc.wait(10)
            except subprocess.TimeoutExpired:
                prom_proc.kill()
        if job:
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGTERM)  # the launcher tears the test bed down
                try:
                    job.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
