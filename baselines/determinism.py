"""The CPU pin: one numeric code path for torch on every x86-64 machine, so that the same config
and seed give the same curve to the last digit on Intel and AMD, with or without AVX-512.

torch's CPU build picks its kernels per machine, and three of its choices change float results
(measured on torch 2.13.0+cpu: the same matmul, sigmoid, log-softmax and GRU give other bits):

* **ATen's vectorised kernels** (``ATEN_CPU_CAPABILITY``: ``default``/``avx2``/``avx512``, the
  best the CPU has unless told): sigmoid, log-softmax, the GRU's gates differ between them.
  Pinned to ``default``, the one every x86-64 CPU runs (``avx2`` would fall back to it silently
  on a CPU without AVX2, and its kernels' results are only as portable as their instructions).
* **MKL's BLAS branch** (``MKL_CBWR``, MKL's Conditional Numerical Reproducibility): unset, MKL
  takes the branch of the CPU it finds (on an AMD EPYC: its AVX2 code; on a Xeon: AVX-512).
  ``MKL_CBWR=AVX2`` is *not* honoured on AMD (MKL reports the automatic branch there);
  ``COMPATIBLE`` is the branch MKL runs alike on every vendor's CPU, and ``STRICT`` makes it
  independent of the buffers' alignment too.
* **threads**: a parallel reduction sums in another order (a 100k-element ``sum`` on 2 threads
  differs from 1); ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` are set to 1 and each baseline sets
  torch's threads from its config (``threads``, default 1).

And two that the baselines do not reach but are closed all the same: oneDNN (``mkldnn``, whose
JIT kernels block by the cache sizes it finds) and NNPACK are switched off, and NumPy's AVX-512
dispatch (``NPY_DISABLE_CPU_FEATURES``) is disabled so its kernels are those of an AVX2 machine.

These are read when torch (MKL, NumPy) first start, so the pin sets them in ``os.environ``
*before* torch is imported: importing ``baselines`` (which every ``python -m baselines.<name>``
and the tests do first) calls ``pin_cpu()``. A user's own value of any of these variables is
replaced (a reference curve holds under one setting only), and recorded in ``meta.json`` as
``outside``; ``CODE_ENV_CPU_PIN=off`` leaves the machine's own choices (faster, not comparable
across machines) and says so in ``meta.json``. ``check_pin()`` reads back what torch and MKL
actually use: a pin that came too late (torch already started its kernels) is a warning with
the fix, and ``pinned: false`` in ``meta.json``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import warnings
from pathlib import Path
from typing import Any

__all__ = ["OPT_OUT", "PINNED_ENV", "check_pin", "cpu_info", "describe", "pin_cpu", "pin_requested"]

OPT_OUT = "CODE_ENV_CPU_PIN"
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "MKL_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}
_EXPECT_CAPABILITY = "DEFAULT"
_MKL_CBWR_BRANCH, _MKL_CBWR_COMPATIBLE, _MKL_CBWR_STRICT = 1, 3, 0x10000  # mkl_cbwr_get's option and values
_outside: dict[str, str | None] = {}


def pin_requested() -> bool:
    """False when the user asked for the machine's own code paths (``CODE_ENV_CPU_PIN=off``)."""
    return os.environ.get(OPT_OUT, "").strip().lower() not in ("off", "0", "false", "no")


def pin_cpu() -> None:
    """Set the pinned variables in ``os.environ`` (remembering the values found there), unless
    ``CODE_ENV_CPU_PIN=off``. Call before torch is imported; harmless to call again."""
    if not pin_requested():
        return
    for name, value in PINNED_ENV.items():
        if name not in _outside:
            _outside[name] = os.environ.get(name)
        os.environ[name] = value


def _mkl_cbwr() -> int | None:
    """MKL's current CNR setting as ``mkl_cbwr_get(MKL_CBWR_ALL)`` reports it (torch links MKL
    statically; the symbol is exported by ``libtorch_cpu``); None when it cannot be read."""
    import torch

    lib_path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        fn = ctypes.CDLL(str(lib_path)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
    return int(fn(-1))


def check_pin(*, warn: bool = True) -> dict[str, Any]:
    """Import torch, switch off oneDNN and NNPACK, and read back what it uses: ``pinned`` is True
    only when ATen runs its default kernels and MKL the compatible strict branch. A pin asked for
    but not in force (torch was started before ``pin_cpu``) warns with the fix."""
    import torch

    if pin_requested():
        torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # a ContextProp: assignment sets the flag
        torch.backends.nnpack.set_flags(False)
    capability = torch.backends.cpu.get_cpu_capability()
    cbwr = _mkl_cbwr()
    effective = {"aten_cpu_capability": capability, "mkl_cbwr": cbwr, "mkldnn_enabled": torch.backends.mkldnn.enabled,
                 "torch_threads": torch.get_num_threads()}  # fmt: skip
    pinned = capability == _EXPECT_CAPABILITY and cbwr == (_MKL_CBWR_COMPATIBLE | _MKL_CBWR_STRICT)
    if warn and pin_requested() and not pinned:
        warnings.warn(
            f"the CPU pin is not in force (ATen capability {capability}, MKL CBWR {cbwr}; wanted "
            f"{_EXPECT_CAPABILITY} and {_MKL_CBWR_COMPATIBLE | _MKL_CBWR_STRICT}): torch started before "
            "baselines.determinism.pin_cpu(); import baselines before torch (python -m baselines.<name> does), "
            f"or set {OPT_OUT}=off to run on this machine's own code paths. This run's curve is not comparable "
            "with the references.", RuntimeWarning, stacklevel=2)  # fmt: skip
    return {"pinned": pinned, "effective": effective}


def cpu_info() -> dict[str, Any]:
    """The CPU this process runs on: model, vendor and the flags that choose numeric code paths."""
    info: dict[str, Any] = {"machine": platform.machine(), "model": None, "vendor": None, "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and info["model"] is None:
            info["model"] = value.strip()
        elif key == "vendor_id" and info["vendor"] is None:
            info["vendor"] = value.strip()
        elif key == "flags" and not info["flags"]:
            info["flags"] = sorted(f for f in value.split() if f.startswith(("avx", "fma", "sse", "amx", "f16c")))
    return info


def describe() -> dict[str, Any]:
    """What ``meta.json`` records of the numeric set-up: the CPU, the pin (asked for, in force,
    the settings and the user's own values they replaced) and the torch / BLAS / NumPy builds."""
    out: dict[str, Any] = {"cpu": cpu_info(), "pin": {"requested": pin_requested(), "settings": dict(PINNED_ENV),
                                                     "outside": dict(_outside)}}  # fmt: skip
    if _importable("torch"):
        import torch

        out["pin"].update(check_pin(warn=False))
        build = [ln.strip(" -") for ln in torch.__config__.show().splitlines()
                 if any(k in ln for k in ("Math Kernel", "MKL-DNN", "CPU capability", "OpenMP", "LAPACK"))]  # fmt: skip
        out["torch"] = {"version": torch.__version__, "build": build}
    else:
        out["pin"].update({"pinned": None, "effective": None})
    import numpy as np

    out["numpy"] = {"version": np.__version__}
    return out


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
