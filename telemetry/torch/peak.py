"""Dense peak FLOP/s of common accelerators, and MFU.

MFU (model FLOPs utilisation) = achieved FLOP/s / peak FLOP/s, per rank. The peak must be the
*dense* figure for the dtype the matmuls run in: vendor datasheets headline the 2:4 structured
sparsity figure (marked "*" / "with sparsity"), which is exactly twice the dense one and is never
reached by dense training. Every entry below is the dense figure, derived from the datasheet
linked on its line (sparse / 2 where the datasheet prints only the sparse one).

Precedence: the ``override`` argument, then the ``TELEMETRY_PEAK_FLOPS`` environment variable
(FLOP/s, e.g. ``989e12``), then the table. CPUs and unknown accelerators give ``None``.
"""

from __future__ import annotations

import logging
import os
import re

import torch

__all__ = ["ENV_VAR", "PEAK_FLOPS", "dtype_key", "mfu", "peak_flops", "peak_flops_for_name",
           "table_key_for_name"]

log = logging.getLogger(__name__)

ENV_VAR = "TELEMETRY_PEAK_FLOPS"

T = 1e12
# name -> {dtype key -> dense peak FLOP/s}. fp32 is the non-tensor-core (CUDA core / vector) rate.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    # (40GB and 80GB; TF32 156, BF16/FP16 312 dense; no FP8)
    "A100 SXM": {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
    # same datasheet, PCIe column: identical dense peaks (lower TDP, so sustained clocks differ)
    "A100 PCIe": {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
    # https://www.nvidia.com/en-us/data-center/h100/ and its datasheet
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
    # (H100 SXM: TF32 989*, BF16/FP16 1,979*, FP8 3,958*; * = with sparsity)
    "H100 SXM": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                 "fp8": 1979 * T},
    # same datasheet, H100 PCIe column: TF32 756*, BF16/FP16 1,513*, FP8 3,026*
    "H100 PCIe": {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T,
                  "fp8": 1513 * T},
    # same datasheet, H100 NVL column (per GPU): TF32 835*, BF16/FP16 1,671*, FP8 3,341*
    "H100 NVL": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T,
                 "fp8": 1670.5 * T},
    # https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: same compute as H100 SXM)
    "H200": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
             "fp8": 1979 * T},
    # same page, H200 NVL column: TF32 835*, BF16/FP16 1,671*, FP8 3,341*
    "H200 NVL": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T,
                 "fp8": 1670.5 * T},
    # https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (GH200: H100-class GPU,
    # FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*)
    "GH200": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
              "fp8": 1979 * T},
    # https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU: FP32 75, TF32 2.2P*,
    # FP16/BF16 4.5P*, FP8 9P*)
    "B200": {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T,
             "fp8": 4500 * T},
    # https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (per GPU: FP32 80, TF32 2.5P*,
    # FP16/BF16 5P*, FP8 10P*)
    "GB200": {"fp32": 80 * T, "tf32": 1250 * T, "bf16": 2500 * T, "fp16": 2500 * T,
              "fp8": 5000 * T},
    # https://www.nvidia.com/en-us/data-center/l40s/ (datasheet table: FP32 91.6,
    # TF32 183 | 366*, BF16/FP16 362.05 | 733*, FP8 733 | 1,466*)
    "L40S": {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T,
             "fp8": 733 * T},
    # https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf
    # (dense: FP32 vector 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9; sparsity doubles)
    "MI300X": {"fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T, "fp16": 1307.4 * T,
               "fp8": 2614.9 * T},
}

# torch.cuda.get_device_name() -> table key. First match wins, so specific patterns come first.
# Examples: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
# "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA GH200 480GB", "AMD Instinct MI300X".
_NAME_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.IGNORECASE), key) for p, key in [
        (r"\bGB200\b", "GB200"),
        (r"\bB200\b", "B200"),
        (r"\bGH200\b", "GH200"),
        (r"\bH200\b.*\bNVL\b", "H200 NVL"),
        (r"\bH200\b", "H200"),
        (r"\bH100\b.*\bNVL\b", "H100 NVL"),
        (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
        (r"\bH100\b", "H100 SXM"),
        (r"\bA100\b.*\bPCIe\b", "A100 PCIe"),
        (r"\bA100\b", "A100 SXM"),
        (r"\bL40S\b", "L40S"),
        (r"\bMI300X\b", "MI300X"),
    ]
]

_DTYPE_KEYS = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _DTYPE_KEYS[getattr(torch, _name)] = "fp8"


_DTYPE_NAMES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "float8": "fp8",
}


def dtype_key(dtype: torch.dtype | str) -> str:
    """The table's key for a dtype: ``fp32``, ``tf32``, ``bf16``, ``fp16`` or ``fp8``.

    ``torch.float32`` maps to ``tf32`` when float32 matmuls may use TF32
    (``torch.set_float32_matmul_precision("high"|"medium")``), else to ``fp32``: an MFU against
    the plain fp32 peak would exceed 100 % once TF32 is on.
    """
    if isinstance(dtype, str):
        key = _DTYPE_NAMES.get(dtype.strip().lower())
        if key is None:
            raise ValueError(f"unknown dtype {dtype!r}; use one of fp32, tf32, bf16, fp16, fp8")
        return key
    if dtype == torch.float32:
        try:
            precision = torch.get_float32_matmul_precision()
        except Exception:  # pragma: no cover - API present in every supported torch
            precision = "highest"
        return "tf32" if precision in ("high", "medium") else "fp32"
    if dtype in _DTYPE_KEYS:
        return _DTYPE_KEYS[dtype]
    raise ValueError(f"no peak FLOP/s is tabulated for {dtype}")


def table_key_for_name(device_name: str) -> str | None:
    """The table key for a ``torch.cuda.get_device_name()`` string, or None if unknown."""
    for pattern, key in _NAME_PATTERNS:
        if pattern.search(device_name):
            return key
    return None


def peak_flops_for_name(device_name: str, dtype: torch.dtype | str = torch.bfloat16) -> float | None:
    """Dense peak FLOP/s for a device name and dtype from the table (no override, no env)."""
    key = table_key_for_name(device_name)
    if key is None:
        return None
    return PEAK_FLOPS[key].get(dtype_key(dtype))


def _from_env() -> float | None:
    raw = os.environ.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of FLOP/s; ignoring it", ENV_VAR, raw)
        return None
    if not value > 0 or value == float("inf"):
        log.warning("%s=%r must be a positive, finite FLOP/s; ignoring it", ENV_VAR, raw)
        return None
    return value


def peak_flops(device: torch.device | str | int | None = None, dtype: torch.dtype | str = torch.bfloat16,
               override: float | None = None) -> float | None:
    """Dense peak FLOP/s of ``device`` for ``dtype``, or None when unknown.

    ``device`` defaults to the current CUDA device (None when CUDA is not available). Matching
    uses ``torch.cuda.get_device_name``; on ROCm builds AMD GPUs are "cuda" devices too.
    """
    if override is not None:
        value = float(override)
        if not value > 0:
            raise ValueError(f"override must be a positive FLOP/s, got {override!r}")
        return value
    env = _from_env()
    if env is not None:
        return env
    if device is None:
        if not torch.cuda.is_available():
            return None
        device = torch.device("cuda", torch.cuda.current_device())
    elif isinstance(device, int):
        device = torch.device("cuda", device)
    else:
        device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    tabulated = peak_flops_for_name(name, dtype)
    if tabulated is None:
        log.debug("no peak FLOP/s tabulated for %r (%s); set %s to enable MFU", name, dtype, ENV_VAR)
    return tabulated


def mfu(flops_per_step: float, step_time_s: float, peak: float) -> float:
    """Model FLOPs utilisation: ``flops_per_step / step_time_s / peak`` (a fraction, not %)."""
    if not step_time_s > 0:
        raise ValueError(f"step_time_s must be positive, got {step_time_s!r}")
    if not peak > 0:
        raise ValueError(f"peak must be a positive FLOP/s, got {peak!r}")
    if flops_per_step < 0:
        raise ValueError(f"flops_per_step must be >= 0, got {flops_per_step!r}")
    return float(flops_per_step) / float(step_time_s) / float(peak)
