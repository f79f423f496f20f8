"""torchvision imported without torch._dynamo, and torch._dynamo still whole for whoever imports it after.

Each case runs in a fresh interpreter: what is imported is the state under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchvision")

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, path: list[Path] | None = None) -> Any:
    """Run ``code`` in a new interpreter with gpuprov (and ``path``) importable; its last stdout line as JSON."""
    pythonpath = os.pathsep.join(str(p) for p in [*(path or []), ROOT])
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": pythonpath})  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torchvision_comes_without_dynamo_and_dynamo_stays_whole() -> None:
    seen = _run("""
        import json, sys
        from gpuprov.images.lazy_torch import torch_modules
        torch, torchvision = torch_modules()
        without = "torch._dynamo" not in sys.modules and "torch._dynamo.utils" not in sys.modules
        x, box = torch.rand(1, 3, 32, 32), torch.tensor([[0, 0, 0, 16, 16.0]])
        shape = list(torchvision.ops.roi_align(x, box, (8, 8), aligned=True).shape)
        # the stand-in: imports the real function
        supported = sys.modules["torchvision.ops.roi_align"].is_compile_supported("cpu")
        import torch._dynamo.utils as real
        print(json.dumps({"without": without, "shape": shape, "supported": supported,
                          "real": hasattr(real, "counters"), "decode": hasattr(torchvision.io, "decode_jpeg")}))
    """)
    assert seen == {"without": True, "shape": [1, 3, 8, 8], "supported": True, "real": True, "decode": True}


def test_a_torchvision_wanting_more_from_dynamo_is_imported_as_it_is(tmp_path: Path) -> None:
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text("from torch._dynamo.utils import counters\nWANTED = 'counters'\n")
    seen = _run("""
        import json, sys
        from gpuprov.images.lazy_torch import torch_modules
        torch, torchvision = torch_modules()
        print(json.dumps({"wanted": torchvision.WANTED, "real": type(torchvision.counters).__name__,
                          "utils": hasattr(sys.modules["torch._dynamo.utils"], "counters")}))
    """, [tmp_path])
    assert seen == {"wanted": "counters", "real": "defaultdict", "utils": True}
