"""Real Redis and PostgreSQL servers for the queue's tests: each on 127.0.0.1, a free port and a
temporary directory, stopped by its pid. `None` from a starter means the binary is absent
(Debian packages redis-server and postgresql; CI installs them)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from tandem.ports import free_port


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    dir: str
    stop_signal: int = signal.SIGTERM   # PostgreSQL: SIGQUIT, its immediate shutdown (a throwaway DB)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, self.stop_signal)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(ready, proc: subprocess.Popen, what: str, log_path: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {_tail(log_path)}")
        try:
            if ready():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"{what} not ready after {timeout_s} s: {_tail(log_path)}")
        time.sleep(0.1)


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-2000:]
    except OSError:
        return ""


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def start_redis() -> Server | None:
    binary = redis_binary()
    try:
        import redis
    except ImportError:   # the pip package (pinned in pyproject.toml) is missing too
        return None
    if binary is None:
        return None

    port, tmp = free_port(), tempfile.mkdtemp(prefix="asyncq-redis-")
    log_path = os.path.join(tmp, "redis.log")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", tmp, "--logfile", log_path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    _wait(lambda: redis.Redis.from_url(url).ping(), proc, "redis-server", log_path)
    return Server(url, proc, tmp)


def postgres_bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return os.path.dirname(found[-1])
    binary = shutil.which("postgres")
    return os.path.dirname(binary) if binary else None


def start_postgres() -> Server | None:
    """initdb + postgres in a temp dir; as the `postgres` user when we are root (PostgreSQL
    refuses to run as root)."""
    bin_dir = postgres_bin_dir()
    try:
        import psycopg
    except ImportError:
        return None
    if bin_dir is None:
        return None

    user = None
    tmp = tempfile.mkdtemp(prefix="asyncq-pg-")
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        user = pw.pw_uid
        os.chown(tmp, pw.pw_uid, pw.pw_gid)
    data, log_path, port = os.path.join(tmp, "data"), os.path.join(tmp, "pg.log"), free_port()
    subprocess.run([os.path.join(bin_dir, "initdb"), "-D", data, "-U", "tandem", "--auth=trust",
                    "-E", "UTF8", "--no-sync"], check=True, user=user,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = open(log_path, "w")
    if user is not None:
        os.chown(log_path, user, -1)
    proc = subprocess.Popen([os.path.join(bin_dir, "postgres"), "-D", data, "-p", str(port),
                             "-k", tmp, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                             "-c", "max_connections=50"],
                            user=user, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"postgresql://tandem@127.0.0.1:{port}/postgres"
    _wait(lambda: psycopg.connect(url, connect_timeout=2).close() is None, proc, "postgres",
          log_path)
    return Server(url, proc, tmp, signal.SIGQUIT)


def fresh_postgres_db(server_url: str, name: str) -> str:
    """A new empty schema on the server (much cheaper than a database) -> a URL whose
    connections use it."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return f"{server_url}?options=-csearch_path%3D{name}"
