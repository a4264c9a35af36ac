"""One torchrun elastic agent per region of the WAN test bed (run by `geoccl run --wan` as rank r
of n, in region r's namespace; tests/python/test_torchrun_regions.py). Emulates one machine per
region with a name: every agent publishes its address (GEOCCL_BIND_ADDR) in DIR/addr.<r>, waits
for all n, and runs torchrun in a mount and UTS namespace of its own whose hostname is node<r>
and whose /etc/hosts names every region's address, so torchrun's c10d rendezvous (hosted by
node0's agent) and the MASTER_ADDR it hands the workers (the first node's name) resolve from
every region. Usage: _torchrun_agent.py DIR -- WORKER ARGS..."""

import os
import shlex
import sys
import time


def main():
    d = sys.argv[1]
    worker = sys.argv[sys.argv.index("--") + 1:]
    r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    with open(os.path.join(d, f"addr.{r}.tmp"), "w") as f:
        f.write(os.environ["GEOCCL_BIND_ADDR"])
    os.replace(os.path.join(d, f"addr.{r}.tmp"), os.path.join(d, f"addr.{r}"))
    deadline = time.monotonic() + 30
    while not all(os.path.exists(os.path.join(d, f"addr.{i}")) for i in range(n)):
        if time.monotonic() > deadline:
            sys.exit("agents: not every region published its address within 30 s")
        time.sleep(0.05)
    lines = ["127.0.0.1 localhost"]
    for i in range(n):
        with open(os.path.join(d, f"addr.{i}")) as f:
            lines.append(f"{f.read().strip()} node{i}")
    hosts = os.path.join(d, f"hosts.{r}")
    with open(hosts, "w") as f:
        f.write("\n".join(lines) + "\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(n), "--nproc_per_node", "1",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", "node0:29400", "--rdzv_id", "regions",
                "--max_restarts", "2", "--monitor_interval", "1", "--redirects", "1", "--tee", "1",
                "--log_dir", os.path.join(d, f"logs.{r}"), *worker]
    script = (f"mount --bind {shlex.quote(hosts)} /etc/hosts && hostname node{r} && "
              f"exec {' '.join(shlex.quote(a) for a in torchrun)}")
    os.execvp("unshare", ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script])


if __name__ == "__main__":
    main()
