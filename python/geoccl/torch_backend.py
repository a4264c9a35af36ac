"""The torch.distributed backend "geoccl" (torch 1.13 third-party backend API).

torch calls :func:`create_process_group` with the group's (prefix) store, its rank and size and the
group's timeout, for the default group and for every ``dist.new_group(backend="geoccl")``. Group
rank 0 starts a geoccl rendezvous store on a free port and publishes ``host|port|session`` through
torch's store; every rank reads it and builds a geoccl Communicator joined at that address.
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


def create_process_group(store, rank, world_size, timeout):
    """The creator function torch.distributed calls (``Backend.register_backend``)."""
    timeout_s = _timeout_seconds(timeout)
    server = None
    if rank == 0:
        host = _advertised_address()
        server = _C.StoreServer(host, 0)
        session = "torch-" + uuid.uuid4().hex[:16]
        value = f"{host}|{server.port}|{session}"
        store.set(_RENDEZVOUS_KEY, value)
    else:
        value = store.get(_RENDEZVOUS_KEY).decode()
    host, port, session = value.split("|")
    return _C.ProcessGroupGeoccl(rank, world_size, host, int(port), session, timeout_s, server)


def register():
    """Registers "geoccl" with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group)
