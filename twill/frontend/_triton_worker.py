"""Compile one Triton kernel up to TTGIR and write the pass-by-pass MLIR dump (a subprocess).

Run by ``twill.frontend.triton_compile`` as ``python _triton_worker.py REQUEST.json``; it imports
triton and nothing from twill, so twill never loads the 1 GB wheel into its own process. Why a
fresh process: Triton opens its MLIR dump stream once per process, so a second kernel compiled in
the same process dumps nothing (research note triton_frontend.md §3).

The request names the kernel file and function, the signature, the constexprs, the options
(num_warps, num_stages) and the CUDA capability. The environment (set by the parent) carries
MLIR_ENABLE_DUMP=<kernel name>, MLIR_DUMP_PATH=<dump file> and TRITON_ALWAYS_COMPILE=1: a cache
hit would run no pass and so dump nothing. Compiling stops after the ttgir stage: the later stages
need nothing twill reads. Exit 0 on success; on failure one line on stderr and exit 3.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys


class _StopAfterTTGIR(Exception):
    """Raised by the replaced llir stage: everything twill reads has been dumped by then."""


def _load_kernel(path: str, name: str):
    spec = importlib.util.spec_from_file_location("twill_triton_kernels", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{path}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        raise RuntimeError(f"{path}: defines no kernel named {name!r}")
    return fn


def _stop_hook(*args):
    """Replace the stages after ttgir with one that stops the compile (called with no arguments
    for the cache key, then with (backend, stages, options, language, capability))."""
    if not args:
        return "twill-stop-after-ttgir", "0"
    stages = args[1]

    def stop(src, metadata):
        raise _StopAfterTTGIR

    stages["llir"] = stop


def main(request_path: str) -> int:
    with open(request_path, encoding="utf-8") as f:
        req = json.load(f)
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    knobs.compilation.always_compile = True
    knobs.runtime.add_stages_inspection_hook = _stop_hook
    fn = _load_kernel(req["file"], req["kernel"])
    signature = dict(req["signature"])
    for name in req["constexprs"]:
        signature.setdefault(name, "constexpr")
    src = ASTSource(fn, signature=signature, constexprs=dict(req["constexprs"]))
    target = GPUTarget("cuda", int(req["capability"]), 32)
    with contextlib.suppress(_StopAfterTTGIR):
        triton.compile(src, target=target, options=dict(req["options"]))
    with open(req["meta_out"], "w", encoding="utf-8") as f:
        json.dump({"triton_version": triton.__version__}, f)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except Exception as err:  # the parent turns this line into its own one-line error
        text = " ".join(str(err).split())[:300]
        print(f"{type(err).__name__}: {text}", file=sys.stderr)
        sys.exit(3)
