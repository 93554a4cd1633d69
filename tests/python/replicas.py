"""The replicated topology on 127.0.0.1 (docs/deployment.md), started and stopped by a test or a
benchmark: redis-server (append-only file fsynced before every answer), N steady-server replicas on
--session-store redis://..., nginx from docker/nginx/steady.conf.template, steady-gateway on nginx.

    with Topology(bin_dir, source_dir, work, replicas=3) as t:
        stub = t.stub(t.nginx_addr)       # or t.replica_addr(i)
        t.kill_replica(1)                 # SIGKILL; t.start_replica(1) brings it back

Every process is killed when the block ends, also on failure.
"""
import os
import re
import signal
import socket
import subprocess
import time

import steady_grpc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_bindable(port, seconds=10):
    """Until the port can be listened on again (SO_REUSEADDR, as nginx binds): a SIGKILLed nginx's
    workers may hold its listening socket a moment after the master is gone, and a new nginx that
    cannot bind retries for seconds, during which clients find nothing there."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                s.listen(1)
                return
            except OSError:
                pass
        time.sleep(0.01)


def wait_for_port(port, proc, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


class Topology:
    def __init__(self, bin_dir, source_dir, work, replicas=3, lease_ms=1500, model=None, gateway=True,
                 server_args=(), state_memory="64M"):
        self.bin_dir, self.source_dir, self.work = bin_dir, source_dir, work
        self.lease_ms = lease_ms
        # The default 1G slot pool takes seconds to zero at start on a small VM (every restart).
        self.state_memory = state_memory
        self.server_args = list(server_args)
        self.model = model or self._init_model()
        self.redis_port = free_port()
        self.replica_ports = [free_port() for _ in range(replicas)]
        self.metrics_ports = [free_port() for _ in range(replicas)]
        self.nginx_port = free_port()
        self.gateway_port = free_port() if gateway else None
        self.procs = {}  # name -> Popen
        self.logs = {}
        self.want_gateway = gateway

    def _init_model(self):
        model = os.path.join(self.work, "model")
        subprocess.run([os.path.join(self.bin_dir, "steady"), "init", "--out", model, "--preset", "tiny",
                        "--tokenizer", os.path.join(self.source_dir, "tests/data/tokenizer/tokenizer.model"),
                        "--mechanism", "taylor", "--order", "2", "--seed", "11"], check=True,
                       stdout=subprocess.DEVNULL)
        return model

    # --- processes ---

    def _spawn(self, name, argv):
        log = os.path.join(self.work, name + ".log")
        self.logs[name] = log
        # A process group of its own: killing it takes nginx's workers (or anything else a process
        # started) along.
        self.procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "a"),
                                            start_new_session=True)
        return self.procs[name]

    def log(self, name):
        with open(self.logs[name]) as f:
            return f.read()

    def start_redis(self):
        redis_dir = os.path.join(self.work, "redis")
        os.makedirs(redis_dir, exist_ok=True)
        p = self._spawn("redis", ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                  "--dir", redis_dir, "--save", "", "--appendonly", "yes",
                                  "--appendfsync", "always", "--daemonize", "no"])
        if not wait_for_port(self.redis_port, p):
            raise RuntimeError("redis-server did not start: " + self.log("redis"))

    @property
    def redis_url(self):
        return "redis://127.0.0.1:%d" % self.redis_port

    def start_replica(self, i):
        name = "replica%d" % i
        # A restarted replica appends to its log: only what the new process writes counts.
        log = os.path.join(self.work, name + ".log")
        start = os.path.getsize(log) if os.path.exists(log) else 0
        p = self._spawn(name, [os.path.join(self.bin_dir, "steady-server"), "--model", self.model,
                               "--port", str(self.replica_ports[i]), "--session-store", self.redis_url,
                               "--lease-ms", str(self.lease_ms), "--replica-name", name,
                               "--drain-timeout", "30", "--metrics-port", str(self.metrics_ports[i]),
                               "--state-memory", self.state_memory] + self.server_args)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            if "listening on" in self.log(name)[start:]:
                return
            time.sleep(0.05)
        raise RuntimeError("%s did not start: %s" % (name, self.log(name)[start:]))

    def start_nginx(self):
        run = os.path.join(self.work, "nginx")
        os.makedirs(run, exist_ok=True)
        with open(os.path.join(self.source_dir, "docker/nginx/steady.conf.template")) as f:
            conf = f.read()
        servers = "\n    ".join("server 127.0.0.1:%d max_fails=2 fail_timeout=1s;" % p for p in self.replica_ports)
        conf = (conf.replace("@LISTEN@", "127.0.0.1:%d" % self.nginx_port).replace("@SERVERS@", servers)
                .replace("@RUN_DIR@", run).replace("@ERROR_LOG@", os.path.join(self.work, "nginx-error.log")))
        if os.geteuid() == 0:
            conf = "user root;\n" + conf  # workers as root can use the test's private temp dir
        path = os.path.join(run, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        wait_until_bindable(self.nginx_port)
        p = self._spawn("nginx", ["nginx", "-c", path, "-p", run, "-e", os.path.join(self.work, "nginx-error.log")])
        if not wait_for_port(self.nginx_port, p):
            raise RuntimeError("nginx did not start: " + self.log("nginx"))

    def start_gateway(self):
        p = self._spawn("gateway", [os.path.join(self.bin_dir, "steady-gateway"), "--grpc-addr", self.nginx_addr,
                                    "--http-port", str(self.gateway_port)])
        if not wait_for_port(self.gateway_port, p):
            raise RuntimeError("steady-gateway did not start: " + self.log("gateway"))

    def metric(self, i, name):
        """A counter or gauge (without labels) from replica i's /metrics."""
        import urllib.request
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_ports[i], timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def signal(self, name, sig):
        p = self.procs.get(name)
        if p and p.poll() is None:
            p.send_signal(sig)

    def kill(self, name):
        p = self.procs.get(name)
        if p and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()

    def kill_replica(self, i):
        self.kill("replica%d" % i)

    def terminate_replica(self, i, timeout=60):
        """SIGTERM: the replica drains, writes what its store lacks, releases its leases, exits."""
        p = self.procs["replica%d" % i]
        p.send_signal(signal.SIGTERM)
        return p.wait(timeout)

    # --- addresses and clients ---

    @property
    def nginx_addr(self):
        return "127.0.0.1:%d" % self.nginx_port

    def replica_addr(self, i):
        return "127.0.0.1:%d" % self.replica_ports[i]

    @property
    def gateway_url(self):
        return "http://127.0.0.1:%d" % self.gateway_port

    def __enter__(self):
        try:
            self.start_redis()
            for i in range(len(self.replica_ports)):
                self.start_replica(i)
            self.start_nginx()
            if self.want_gateway:
                self.start_gateway()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for name in list(self.procs):
            self.signal(name, signal.SIGCONT)  # a paused process cannot die
            self.kill(name)
            try:  # what the group's leader left behind (nginx's workers once their master died)
                os.killpg(self.procs[name].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def redis_command(port, *args):
    """One command to the Redis on 127.0.0.1:port, its reply decoded (RESP: strings, integers, nil,
    arrays). The tests need no Redis client library, and a socket is much faster than redis-cli."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("*%d\r\n" % len(args)).encode() +
                  b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in map(str, args)))
        f = s.makefile("rb")

        def read():
            line = f.readline().rstrip(b"\r\n")
            kind, rest = line[:1], line[1:]
            if kind == b"+":
                return rest.decode()
            if kind == b"-":
                raise RuntimeError("redis: " + rest.decode())
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2].decode()
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [read() for _ in range(n)]
            raise RuntimeError("redis: unexpected reply %r" % line)
        return read()


def lease_holders(topology):
    """{session id: the replica name ("replica1") holding its lease} for every lease in Redis, read
    in one round trip."""
    script = ("local out = {} for _, k in ipairs(redis.call('KEYS', '*:lease:*')) do "
              "local v = redis.call('GET', k) if v then table.insert(out, k) table.insert(out, v) end end "
              "return out")
    flat = redis_command(topology.redis_port, "EVAL", script, 0) or []
    return {flat[i].split(":lease:", 1)[1]: flat[i + 1].split(" ")[0] for i in range(0, len(flat), 2)}


def lease_holder(topology, session_id):
    """The replica name holding a session's lease in Redis, or None."""
    return lease_holders(topology).get(session_id)


def busiest_replica(topology):
    """The replica name holding the most session leases in Redis now, or None."""
    counts = {}
    for holder in lease_holders(topology).values():
        counts[holder] = counts.get(holder, 0) + 1
    return max(counts, key=counts.get) if counts else None
