"""Connecting to a Ray cluster (`--ray ADDRESS` of audit.certify and audit.samples), with errors that name the
address: Ray retries an unreachable cluster for minutes without saying so, so its port is tried once first."""
from __future__ import annotations

import socket
from pathlib import Path



def _package_path(name: str) -> str:
    """Where an installed package's code lives (shipped to the cluster's workers as a py_module)."""
    import importlib
    return str(Path(importlib.import_module(name).__file__).parent)


def check_reachable(address: str, timeout: float = 5.0) -> None:
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RuntimeError(f"--ray {address}: expected host:port, ray://host:port or 'local'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RuntimeError(f"--ray {address}: cannot start or reach a Ray cluster there (no answer on "
                           f"{host}:{port}: {e.strerror or e})") from e


def worker_setup() -> None:
    """Run in every Ray worker (and here) before it reads files: Ray Data's file listing imports fsspec's HTTP
    filesystem from several threads at once; without aiohttp installed that import fails, and a thread that finds
    the module half imported raises ImportError where Ray expects (and catches) ModuleNotFoundError. Marking the
    module missing makes every such import fail the expected way."""
    import sys
    try:
        import fsspec.implementations.http  # noqa: F401
    except ImportError:
        sys.modules["fsspec.implementations.http"] = None
    except Exception:  # noqa: BLE001 - no fsspec at all, or another error: Ray's own handling applies
        pass


def connect(address: str):
    """ray.init on ADDRESS ("local": start one here), with the audit's packages shipped to the workers (runtime_env
    py_modules: the cluster needs only the pinned Python packages). A clear error naming the address when Ray is
    missing or the cluster cannot be reached."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError(f"--ray {address}: Ray is not installed ({e})") from e
    if address != "local":
        check_reachable(address)
    try:
        # "local" is Ray's own word for a new instance started here: None would attach to whatever RAY_ADDRESS or
        # the latest `ray start` on this machine names (another job's cluster; Ray 2.60 then asks for its token)
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, ignore_reinit_error=True,
                 runtime_env={"py_modules": [_package_path("audit"), _package_path("rlhf")],
                              "worker_process_setup_hook": "audit.core.ray_cluster.worker_setup"})
        worker_setup()
    except Exception as e:   # noqa: BLE001 - ConnectionError, ValueError, RuntimeError by Ray version
        raise RuntimeError(f"--ray {address}: cannot start or reach a Ray cluster there ({type(e).__name__}: {e})") from e
    return ray
