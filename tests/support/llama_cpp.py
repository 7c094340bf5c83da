"""llama-cpp-python for the tests that check an exported GGUF answers in llama.cpp as in the app.

`llama_model` opens a file without weight repacking (extra buffer types): on a CPU that reports
AMX while its VM has not enabled it (this sandbox), llama.cpp's repacked AMX q8_0 kernel dies with
SIGILL. Repacking changes how llama.cpp lays out the weights in memory, not the file.
"""

from __future__ import annotations


def llama_model(llama_cpp, path: str, n_ctx: int = 256, **kwargs):
    """llama_cpp.Llama on `path` with repacking off (`llama_cpp`: the imported module)."""
    low = llama_cpp.llama_cpp
    default = low.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params
    try:
        return llama_cpp.Llama(path, n_ctx=n_ctx, verbose=False, seed=0, **kwargs)
    finally:
        low.llama_model_default_params = default
