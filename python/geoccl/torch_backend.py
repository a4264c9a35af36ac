"""The torch.distributed backend "geoccl" (torch 1.13 third-party backend API).

torch calls :func:`create_process_group` (registered with torch's extended backend API) with the
group's (prefix) store, its rank and size, the group's timeout and the ``pg_options`` given to
``init_process_group`` / ``new_group``, for the default group and for every
``dist.new_group(backend="geoccl")``. Group rank 0 starts a geoccl rendezvous store on a free port
and publishes ``host|port|session`` through torch's store; every rank reads it and builds a geoccl
Communicator joined at that address. With ``GEOCCL_STORE`` set (a standalone ``geoccl store`` or
etcd) no rank hosts a store: rank 0 publishes only the session, and every rank meets at that store.

``pg_options=geoccl.ProcessGroupOptions(priority="bulk")`` makes every operation of the group run
on the bulk (background) priority class: checkpoints and other traffic that must not delay the
gradients. :func:`new_bulk_group` is the shorthand.
"""

import datetime
import os
import socket
import uuid

import torch.distributed as dist

from . import _C

BACKEND_NAME = "geoccl"
_RENDEZVOUS_KEY = "geoccl/rendezvous"


def _advertised_address():
    """The address other ranks reach this host at.

    GEOCCL_BIND_ADDR when set; else the local address that routes to MASTER_ADDR (what geoccl's
    own Config does); else this host's name resolved; else 127.0.0.1.
    """
    addr = os.environ.get("GEOCCL_BIND_ADDR")
    if addr:
        return addr
    master = os.environ.get("GEOCCL_MASTER_ADDR") or os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((socket.gethostbyname(master), 9))
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        a = socket.gethostbyname(socket.gethostname())
        if a and not a.startswith("127."):
            return a
    except OSError:
        pass
    return "127.0.0.1"


def _timeout_seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if timeout is None:
        return 1800.0
    return float(timeout)


PRIORITIES = ("gradient", "bulk")


class ProcessGroupOptions:
    """Options of a "geoccl" process group (``pg_options`` of ``init_process_group``/``new_group``).

    priority: "gradient" (default, highest) or "bulk" (background, uses what gradients leave).
    Every operation of the group runs on that class; every member must create it alike.
    """

    def __init__(self, priority="gradient"):
        if priority not in PRIORITIES:
            raise ValueError(f"geoccl: unknown priority {priority!r} (expected one of {', '.join(PRIORITIES)})")
        self.priority = priority

    def __repr__(self):
        return f"ProcessGroupOptions(priority={self.priority!r})"


def new_bulk_group(ranks=None, timeout=None):
    """A "geoccl" group (of ``ranks``, default all) whose operations all use the bulk class.

    Like ``dist.new_group``, every rank of the default group must call it, members or not.
    """
    kwargs = {} if timeout is None else {"timeout": timeout}
    return dist.new_group(ranks, backend=BACKEND_NAME, pg_options=ProcessGroupOptions("bulk"), **kwargs)


def create_process_group(backend_opts, pg_options=None):
    """The creator function torch.distributed calls (``Backend.register_backend``, extended API):
    ``backend_opts`` carries store, group_rank, group_size and timeout."""
    if pg_options is None:
        pg_options = ProcessGroupOptions()
    elif not isinstance(pg_options, ProcessGroupOptions):
        raise TypeError(f"geoccl: pg_options must be a geoccl.ProcessGroupOptions, got {type(pg_options).__name__}")
    store, rank, world_size = backend_opts.store, backend_opts.group_rank, backend_opts.group_size
    timeout_s = _timeout_seconds(backend_opts.timeout)
    server = None
    if rank == 0:
        host = _advertised_address()
        session = "torch-" + uuid.uuid4().hex[:16]
        port = 0
        if not os.environ.get("GEOCCL_STORE"):
            # No store outside the ranks: this rank hosts the group's. With GEOCCL_STORE every
            # rank meets there (the Communicator reads it from the environment), and the group
            # survives the death of any rank, this one included.
            server = _C.StoreServer(host, 0)
            port = server.port
        value = f"{host}|{port}|{session}"
        store.set(_RENDEZVOUS_KEY, value)
    else:
        value = store.get(_RENDEZVOUS_KEY).decode()
    host, port, session = value.split("|")
    return _C.ProcessGroupGeoccl(rank, world_size, host, int(port), session, timeout_s, server,
                                 pg_options.priority)


def register():
    """Registers "geoccl" with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True)


def abort(group=None, reason=""):
    """Aborts a "geoccl" process group (default: the default group) or a ``geoccl.Communicator``.

    torch 1.13's c10d has no abort hook, so this is geoccl's: every pending and later operation of
    the group fails with ``GeocclError`` (aborted, naming this rank and ``reason``) on this rank and
    on every member it can reach, within about a round trip. ``dist.destroy_process_group()``
    afterwards returns without waiting for peers.
    """
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if not isinstance(group, (_C.ProcessGroupGeoccl, _C.Communicator)):
        raise TypeError(f"geoccl.abort: expected a \"geoccl\" process group or a geoccl.Communicator, "
                        f"got {type(group).__name__}")
    group.abort(reason)
