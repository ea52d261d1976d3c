"""Regenerate the checked-in TTGIR fixtures of the example kernels (needs ``twill[triton]``).

    python examples/triton/make_fixtures.py            # with the triton of this Python
    TWILL_TRITON_PYTHON=/path/to/venv/bin/python python examples/triton/make_fixtures.py

For each kernel and each Triton target (sm_90 for h100/h200, sm_100 for b200) the kernel is
compiled with its launch description, and the one module twill imports from the MLIR dump (the
loop before software pipelining, docs/frontend.md) is written, with its "IR Dump Before" header,
to ``ttgir/triton-<version>/<kernel>.sm<cap>.ttgir``. Absolute paths of this repository are made
relative so the files do not depend on where they were built. Tests read these files, so CI needs
no triton.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from twill.frontend.mlir_text import split_dump  # noqa: E402
from twill.frontend.triton_compile import compile_to_dump, read_launch  # noqa: E402
from twill.frontend.ttgir import PREFERRED_PASSES, import_ttgir  # noqa: E402

KERNELS = {"fa_fwd": "attn_fwd", "gemm_tma": "matmul_tma", "gemm_persistent": "matmul_tma_persistent",
           "gemm_ptr": "matmul_ptr"}
TARGETS = {90: "h100", 100: "b200"}


def main() -> int:
    from twill.arch.registry import get_arch

    for stem, kernel in KERNELS.items():
        launch = read_launch(HERE / f"{stem}.toml")
        for capability, arch in TARGETS.items():
            dump, version = compile_to_dump(HERE / "kernels.py", kernel, launch, capability)
            imported = import_ttgir(dump, get_arch(arch), name=stem, values=dict(launch.values))
            snapshot = next(s for s in split_dump(dump) if s.before_pass == imported.before_pass)
            header = f"// -----// IR Dump Before {snapshot.before_pass} ('builtin.module' operation) //----- //"
            text = f"{header}\n{snapshot.text.strip()}\n".replace(f"{ROOT}/", "")
            out = HERE / "ttgir" / f"triton-{version}" / f"{stem}.sm{capability}.ttgir"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
            assert imported.before_pass in PREFERRED_PASSES
            print(f"{out.relative_to(ROOT)}: {len(imported.body.ops)} ops, {len(imported.body.edges)} edges "
                  f"(before {imported.before_pass})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
