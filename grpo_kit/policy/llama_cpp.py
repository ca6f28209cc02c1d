"""GGUF through llama.cpp: its converter, its quantizer and its runtime (``llama-cpp-python``) as a generation backend.

Nothing here needs a network or a GPU. It needs ``llama-cpp-python`` compiled from its source distribution, and
from the same distribution the llama.cpp it vendors, whose ``convert_hf_to_gguf.py``, ``conversion/`` and
``gguf-py/`` are the converter: ``pip install`` and ``pip download`` get them anywhere (the messages say how), and
in a clone of the repository ``make install-llama`` builds both into ``.llama/`` (beside ``.venv``, as
``.deepspeed/`` is built). The quantizer is llama.cpp's ``llama_model_quantize`` (what the
``llama-quantize`` tool calls), reached through ``llama-cpp-python``. ``GRPO_KIT_LLAMA`` names another
folder; an installed ``llama_cpp`` package is used as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_kit.policy.generation import Generation, OnResult, Prompt, Sampling
from grpo_kit.system.files import replaced, sha256_file

__all__ = ["CONVERTER_TYPES", "GGUF_BYTES_PER_WEIGHT", "LLAMA_CPP_PYTHON", "QUANT_TYPES", "LlamaCppBackend",
           "convert_to_gguf", "import_llama_cpp", "llama_dir", "quantize_gguf"]

#: The environment variable naming the folder ``make install-llama`` builds (default ``.llama``).
LLAMA_ENV = "GRPO_KIT_LLAMA"
#: Types the converter writes itself (``convert_hf_to_gguf.py --outtype``).
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
#: Bytes per weight of a GGUF of each type, for the disk an export needs: ggml's block layouts
#: (ggml/src/ggml-common.h): q8_0 stores 32 weights as 32 int8 and a 16-bit scale, 34 bytes; every type the quantizer
#: writes (QUANT_TYPES) stores fewer bits a weight, so q8_0's size bounds theirs.
GGUF_BYTES_PER_WEIGHT = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}
#: Types the quantizer writes from an f16 GGUF: name -> llama.cpp's ``LLAMA_FTYPE_MOSTLY_<NAME>`` constant.
QUANT_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k")
#: The llama-cpp-python the kit is built and tested with (requirements-llama.txt).
LLAMA_CPP_PYTHON = "0.3.36"
#: How to get llama-cpp-python, the pip route first (what works outside a clone of the kit's repository).
_RUNTIME = (f"pip install llama-cpp-python=={LLAMA_CPP_PYTHON} sentencepiece (pip compiles llama.cpp: about 12 "
            "minutes on 2 cores)")
#: How to get the converter: from the same source distribution, which vendors llama.cpp.
_CONVERTER = (f"pip download --no-deps --no-binary :all: llama-cpp-python=={LLAMA_CPP_PYTHON} -d llama-src && tar "
              f"-xzf llama-src/llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz -C llama-src, then export "
              f"{LLAMA_ENV}=$PWD/llama-src/llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor (the folder holding "
              "llama.cpp/convert_hf_to_gguf.py)")
_CLONE = "in a clone of grpo_kit's repository, make install-llama builds both into .llama/ instead"


def llama_dir() -> Path:
    """The folder ``make install-llama`` builds: ``$GRPO_KIT_LLAMA``, else ``.llama`` in the working folder."""
    return Path(os.environ.get(LLAMA_ENV, ".llama")).resolve()


def _converter() -> Path:
    folder = llama_dir() / "llama.cpp"
    if not (folder / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(f"llama.cpp's converter is not in {folder}: {_RUNTIME}, and unpack its converter from "
                                f"the same source: {_CONVERTER}; {_CLONE}")
    return folder


def import_llama_cpp() -> Any:
    """Import ``llama_cpp`` (llama-cpp-python): installed, or from :func:`llama_dir`.

    Raises:
        ImportError: in neither place (the message says how to build it).
    """
    try:
        import llama_cpp
    except ImportError:
        folder = str(llama_dir())
        if not (Path(folder) / "llama_cpp").is_dir():
            raise ImportError(f"llama-cpp-python is not installed and not in {folder}: {_RUNTIME}; {_CLONE}"
                              ) from None
        sys.path.append(folder)
        import llama_cpp
    return llama_cpp


def _child_env() -> dict[str, str]:
    """The environment of a child running :mod:`grpo_kit.policy.gguf_convert`: this kit and :func:`llama_dir` first on
    its path."""
    path = [str(Path(__file__).resolve().parents[2]), str(llama_dir()), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}


def _written_by_child(args: list[str | None], out_file: str | Path, failed: str) -> Path:
    """Run :mod:`grpo_kit.policy.gguf_convert` with ``args`` (``None`` standing for the file it writes) in a child
    Python (:func:`_child_env`), writing ``out_file`` whole or not at all (:func:`grpo_kit.system.files.replaced`:
    a temporary file beside it, renamed over it once the child succeeded; removed on a failure or Ctrl-C).

    Raises:
        RuntimeError: the child failed, or wrote nothing (``failed``, then the end of what it printed).
    """
    with replaced(out_file) as partial:
        done = subprocess.run([sys.executable, "-m", "grpo_kit.policy.gguf_convert",
                               *[str(partial) if a is None else a for a in args]], capture_output=True, text=True,
                              env=_child_env())
        if done.returncode != 0 or not partial.stat().st_size:
            raise RuntimeError(f"{failed}:\n{(done.stdout + done.stderr)[-3000:]}")
    return Path(out_file)


def convert_to_gguf(model_dir: str | Path, out_file: str | Path, outtype: str = "f16") -> Path:
    """Convert a saved transformers model to one GGUF file with llama.cpp's own ``convert_hf_to_gguf.py``.

    Runs in a child process (:mod:`grpo_kit.policy.gguf_convert`); the file appears whole or not at all.

    Args:
        model_dir: a folder with ``config.json``, safetensors weights and the tokenizer (a merged model).
        out_file: the ``.gguf`` to write.
        outtype: one of :data:`CONVERTER_TYPES`.

    Returns:
        ``out_file``.

    Raises:
        FileNotFoundError: the converter is not built (the message says how).
        RuntimeError: the converter failed, or refused ``outtype`` (its last lines of output are in the message;
            :meth:`grpo_kit.runs.export_formats.Gguf.check` checks the type before any work).
    """
    return _written_by_child([str(_converter()), str(model_dir), None, outtype], out_file,
                             f"llama.cpp's converter failed on {model_dir}")


def quantize_gguf(source: str | Path, out_file: str | Path, quant: str, threads: int = 0) -> Path:
    """Quantize a GGUF with llama.cpp's ``llama_model_quantize`` (what ``llama-quantize`` runs), in a child process.

    Tensors whose rows do not divide into the type's blocks (k-quants need 256 columns) get a fallback
    type chosen by llama.cpp, as ``llama-quantize`` does.

    Args:
        source: an f32 / f16 / bf16 GGUF.
        out_file: the ``.gguf`` to write (whole or not at all).
        quant: one of :data:`QUANT_TYPES`.
        threads: quantizer threads (0: all cores).

    Raises:
        RuntimeError: llama.cpp returned an error, or has no such ``quant`` (its last lines of output are in the
            message; :meth:`grpo_kit.runs.export_formats.Gguf.check` checks the type before any work).
    """
    return _written_by_child(["--quantize", str(source), None, quant, str(threads)], out_file,
                             f"llama.cpp could not quantize {source} to {quant}")


class LlamaCppBackend:
    """Greedy generation by llama.cpp from a GGUF file (the runtime that serves it), one prompt at a time.

    The prompt is rendered to text by ``render`` (the trained policy's chat template) and llama.cpp tokenizes
    it itself, special tokens included, so its tokenizer and pre-tokenizer are checked too. The context window is the
    model's training context; llama.cpp runs ``OMP_NUM_THREADS`` CPU threads, else one per core.

    Args:
        path: the ``.gguf`` file.
        render: a conversational prompt -> the prompt text (e.g. ``tokenizer.apply_chat_template(...,
            tokenize=False, add_generation_prompt=True)``).
    """

    def __init__(self, path: str | Path, render: Callable[[Prompt], str]) -> None:
        llama_cpp = import_llama_cpp()
        self.path = Path(path)
        self.render = render
        threads = int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1
        # The prompt's threads too (llama-cpp-python's default is every core): on a busy machine llama.cpp's
        # threads wait for each other spinning, and 32 questions took 20 s instead of 0.7 s.
        self.llm = llama_cpp.Llama(model_path=str(self.path), n_ctx=0, n_threads=threads, n_threads_batch=threads,
                                   seed=0, verbose=False)

    def identity(self) -> str:
        """``llama.cpp:<file name>@<16 hex digits of the file's SHA-256>``."""
        return f"llama.cpp:{self.path.name}@{sha256_file(self.path)[:16]}"

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling,
                 on_result: OnResult | None = None) -> list[list[Generation]]:
        """Greedy completions, one per prompt (see :meth:`grpo_kit.policy.generation.Backend.generate`).

        Raises:
            ValueError: sampled decoding (this backend verifies exports, which is greedy).
        """
        if not sampling.greedy:
            raise ValueError("the llama.cpp backend decodes greedily (temperature 0) only")
        eos = self.llm.token_eos()  # the GGUF's own end-of-sequence token (transformers stops at the tokenizer's)
        results = []
        for i, prompt in enumerate(prompts):
            self.llm.reset()  # each question from an empty context: no prefix reuse between questions
            ids = self.llm.tokenize(self.render(prompt).encode("utf-8"), add_bos=False, special=True)
            new: list[int] = []
            # llama.cpp's generate never stops by itself: the loop ends at the end-of-sequence token or the budget
            for token in self.llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
                if token == eos:
                    break
                new.append(token)
                if len(new) >= sampling.max_new_tokens:
                    break
            ended = len(new) < sampling.max_new_tokens  # stopped by the end-of-sequence token
            # Bytes of a character cut by the budget become U+FFFD, as transformers' decode writes them.
            text = self.llm.detokenize(new, special=False).decode("utf-8", errors="replace")
            generation = Generation(text=text, num_tokens=len(new) + ended,
                                    truncated=not ended and len(new) >= sampling.max_new_tokens)
            results.append([generation])
            if on_result is not None:
                on_result(i, [generation])
        return results
