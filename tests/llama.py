"""Whether llama.cpp is built (``make install-llama``: llama-cpp-python and the converter), for the GGUF tests."""

from __future__ import annotations

import pytest

from grpo_kit.policy.llama_cpp import import_llama_cpp, llama_dir


def llama_built() -> bool:
    """llama-cpp-python imports and llama.cpp's ``convert_hf_to_gguf.py`` is in place."""
    try:
        import_llama_cpp()
    except ImportError:
        return False
    return (llama_dir() / "llama.cpp" / "convert_hf_to_gguf.py").is_file()


needs_llama = pytest.mark.skipif(not llama_built(), reason="llama.cpp not built: make install-llama")
