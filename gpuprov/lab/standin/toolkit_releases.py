"""Release data of the CUDA toolkit, cuDNN and NCCL stand-ins, and NVIDIA's integer version codes.

Release data (nvcc build strings, library build numbers) is taken from NVIDIA's published releases as far as
the maintainers know them; ``verified`` in :data:`CUDA_RELEASES` says which were checked.
:mod:`gpuprov.lab.standin.toolkit` builds the packages from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuprov.exceptions import ConfigError


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA toolkit release as NVIDIA's repository carries it.

    ``version`` is major.minor (``"12.8"``); ``package`` the Debian version of ``cuda-toolkit-X-Y``
    (``"12.8.1-1"``); ``nvcc`` the compiler's ``V`` version; ``built`` and ``build`` the two lines nvcc
    prints; ``cudart`` the runtime library's version; ``year`` the copyright year nvcc prints.
    """

    version: str
    package: str
    nvcc: str
    built: str
    build: str
    cudart: str
    year: str
    verified: bool = False

    @property
    def major(self) -> str:
        """``"12"`` for CUDA 12.8."""
        return self.version.split(".")[0]

    @property
    def dashed(self) -> str:
        """``"12-8"``, the package-name form."""
        return self.version.replace(".", "-")


#: CUDA releases the stand-in repository offers (the last update of each minor that NVIDIA published).
#: 11.8 and 12.8 nvcc banners were checked against real installs; the others follow the same format.
CUDA_RELEASES: dict[str, CudaRelease] = {
    r.version: r for r in (
        CudaRelease("11.4", "11.4.4-1", "11.4.152", "Sun_Feb_20_21:29:30_PST_2022",
                    "cuda_11.4.r11.4/compiler.30521435_0", "11.4.148", "2022"),
        CudaRelease("11.8", "11.8.0-1", "11.8.89", "Wed_Sep_21_10:33:58_PDT_2022",
                    "cuda_11.8.r11.8/compiler.31833905_0", "11.8.89", "2022", verified=True),
        CudaRelease("12.2", "12.2.2-1", "12.2.140", "Tue_Aug_15_22:02:13_PDT_2023",
                    "cuda_12.2.r12.2/compiler.33191640_0", "12.2.140", "2023"),
        CudaRelease("12.4", "12.4.1-1", "12.4.131", "Thu_Mar_28_02:18:24_PDT_2024",
                    "cuda_12.4.r12.4/compiler.34097967_0", "12.4.127", "2024"),
        CudaRelease("12.8", "12.8.1-1", "12.8.93", "Fri_Feb_21_20:23:50_PST_2025",
                    "cuda_12.8.r12.8/compiler.35583870_0", "12.8.90", "2025", verified=True),
        CudaRelease("13.0", "13.0.2-1", "13.0.88", "Wed_Oct__8_20:32:45_PDT_2025",
                    "cuda_13.0.r13.0/compiler.36580663_0", "13.0.96", "2025"),
    )
}

#: cuDNN releases: version -> (full 4-part version, CUDA builds). cuDNN 9 builds are per CUDA major
#: (package ``libcudnn9-cuda-<major>``); cuDNN 8 builds carry the CUDA major.minor they were built with.
CUDNN_RELEASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "8.9.7": ("8.9.7.29", ("11.8", "12.2")),
    "9.1.0": ("9.1.0.70", ("11", "12")),
    "9.8.0": ("9.8.0.87", ("11", "12")),
    "9.10.2": ("9.10.2.21", ("12",)),
    "9.13.0": ("9.13.0.50", ("12", "13")),
}

#: NCCL releases and the CUDA builds NVIDIA publishes of each (``libnccl2=<v>-1+cuda<X.Y>``).
NCCL_RELEASES: dict[str, tuple[str, ...]] = {
    "2.16.5": ("11.8", "12.0"),
    "2.21.5": ("11.0", "12.2", "12.4"),
    "2.26.2": ("12.2", "12.8"),
    "2.27.7": ("12.9", "13.0"),
}


def cuda_release(cuda: str) -> CudaRelease:
    """The stand-in data of CUDA ``cuda`` (major.minor, ``"12.8"``).

    Raises:
        ConfigError: no stand-in data for ``cuda`` (the message lists those offered).
    """
    try:
        return CUDA_RELEASES[cuda]
    except KeyError:
        raise ConfigError(f"stand-in CUDA {cuda}: offered are {', '.join(CUDA_RELEASES)}") from None


def version_code(version: str, scale: Sequence[int]) -> int:
    """Integer version code: ``version_code("9.8.0", (10000, 100, 1))`` is 90800.

    cuDNN 9 and NCCL >= 2.9 use (10000, 100, 1); cuDNN 8 uses (1000, 100, 1); the CUDA runtime
    (1000, 10) on major.minor (12080 for 12.8). Parts of ``version`` beyond ``len(scale)`` are ignored.
    """
    parts = [int(p) for p in version.split(".")[: len(scale)]]
    return sum(p * s for p, s in zip(parts, scale, strict=False))
