"""braid's c10d backend for PyTorch.

Installed, the package makes ``torch.distributed.init_process_group("braid")`` work with no import
(torch >= 2.14 finds the ``torch.distributed.backends`` entry point). Importing it registers the
backend too, for code that prefers to be explicit::

    import torch.distributed as dist
    dist.init_process_group("braid", init_method="env://")

The backend serves CPU and CUDA tensors. CUDA tensors follow ProcessGroupNCCL's semantics: each
process group has its own stream per device (from torch's pool), which first waits for the
caller's current stream; Work.wait() makes the current stream wait for the work (no host block);
futures complete with the tensors; several ranks may share one GPU. All tensors of one call must
be on one device. It loads only under the torch minor version it was compiled against
(TORCH_BUILT_AGAINST; the c10d Backend ABI changes between minors).
"""
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _C

__all__ = ["register", "BACKEND_NAME", "TORCH_BUILT_AGAINST", "version"]

BACKEND_NAME = "braid"
TORCH_BUILT_AGAINST = _C.TORCH_BUILT_AGAINST  # the torch minor version _C was compiled against
version = _C.version


def _check_torch_version() -> None:
    running = ".".join(torch.__version__.split(".")[:2])
    if running != TORCH_BUILT_AGAINST:
        raise ImportError(
            f"braid_torch was built against torch {TORCH_BUILT_AGAINST} but torch "
            f"{torch.__version__} is running; reinstall braid_torch against this torch "
            "(pip install --no-build-isolation ./bindings/torch)")


def _create(name: str):
    def create(opts, backend_options=None):
        timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(seconds=1800)
        parent = getattr(opts, "split_from", None)
        if isinstance(parent, _C.BraidBackend):
            # new_group on a default group bound to a device (init_process_group(device_id=...)):
            # torch asks for a split of the parent, collective over all its ranks (non-members
            # call perform_nocolor_split). The parent is the default group, so the subgroup's
            # global ranks are its ranks in the parent.
            return parent.split_member(opts.store, list(opts.global_ranks_in_group),
                                       opts.group_rank, timeout)
        return _C.BraidBackend(opts.store, opts.group_rank, opts.group_size, timeout, name)
    return create


def register(name: str = BACKEND_NAME) -> None:
    """Registers the backend with torch.distributed under `name` (idempotent).

    Devices: "cpu" and "cuda" (init_process_group("cpu:braid,cuda:nccl") still mixes backends).
    """
    if name.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(name, _create(name), extended_api=True, devices=["cpu", "cuda"])


_check_torch_version()
register()
