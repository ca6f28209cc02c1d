"""Whether llama.cpp is built (``make install-llama``: llama-cpp-python and the converter), for the GGUF tests."""

from __future__ import annotations

import sysconfig

import pytest

from grpo_kit.policy.llama_cpp import import_llama_cpp, llama_dir


def llama_built() -> bool:
    """llama-cpp-python imports, llama.cpp's ``convert_hf_to_gguf.py`` is in place, and the folder's compiled Python
    extensions (its sentencepiece, which the converter imports) are this Python's: ``.llama`` is built for ``.venv``'s
    Python, and ``make test-py313`` runs another."""
    try:
        import_llama_cpp()
    except ImportError:
        return False
    folder = llama_dir()
    built = {path.name[path.name.index(".cpython"):] for path in folder.glob("*/*.cpython-*.so")}
    return (folder / "llama.cpp" / "convert_hf_to_gguf.py").is_file() and (
        not built or sysconfig.get_config_var("EXT_SUFFIX") in built)


needs_llama = pytest.mark.skipif(not llama_built(), reason="llama.cpp not built for this Python: make install-llama")
