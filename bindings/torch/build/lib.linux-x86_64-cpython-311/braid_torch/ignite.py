"""Opt-in PyTorch-Ignite integration: ``import braid_torch.ignite`` before using ``idist``.

Ignite 0.5 keeps a fixed tuple of backend names (``("nccl", "gloo", "mpi")``) and refuses others
in ``idist.spawn``, ``idist.Parallel`` and ``idist.initialize`` ("Backend should be one of ...",
pytorch/ignite#1728). Importing this module adds "braid" to that tuple, so the documented
collective tutorial runs with ``backend="braid"`` unchanged otherwise. It changes nothing else in
ignite. Without it, ``dist.init_process_group("braid")`` followed by idist calls works as well.
"""
import braid_torch
from ignite.distributed.comp_models import native as _native

if braid_torch.BACKEND_NAME not in _native._NativeDistModel.available_backends:
    _native._NativeDistModel.available_backends = tuple(
        _native._NativeDistModel.available_backends) + (braid_torch.BACKEND_NAME,)
