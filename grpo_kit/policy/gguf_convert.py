"""Run llama.cpp's own converter, ``convert_hf_to_gguf.py``, on a saved model: ``python -m grpo_kit.policy.gguf_convert
LLAMA_CPP_DIR MODEL_DIR OUTFILE OUTTYPE``; or its quantizer: ``python -m grpo_kit.policy.gguf_convert --quantize
SOURCE OUTFILE TYPE THREADS``.

:func:`grpo_kit.policy.llama_cpp.convert_to_gguf` and :func:`grpo_kit.policy.llama_cpp.quantize_gguf` run this in a
child process (the converter is a script that sets up logging and reads ``sys.argv``; the quantizer prints a line
per tensor from C, which the parent keeps out of its own output). The conversion changes one thing: llama.cpp names
a BPE tokenizer's pre-tokenizer by a hash of the token ids it gives on a fixed text (``get_vocab_base_pre`` in
``conversion/base.py``), so a tokenizer trained anew, such as the kit's tiny policy's, is refused ("BPE
pre-tokenizer was not recognized") even when it splits text exactly as Qwen2's does. Only when the hash is unknown
and the saved ``tokenizer.json`` holds Qwen2's pre-tokenizer (its split pattern, then byte-level without a regex) is
it named ``qwen2``; anything else is refused as before. The loaded-back check
(:func:`grpo_kit.runs.verification.verify_export`) proves the choice: llama.cpp then tokenizes the prompts itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Qwen2's pre-tokenizer split pattern (transformers' ``tokenization_qwen2.PRETOKENIZE_REGEX``; llama.cpp's
#: ``LLAMA_VOCAB_PRE_TYPE_QWEN2`` uses the same).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


#: The fields of a pre-tokenizer ``Sequence`` that split exactly as Qwen2's: a ``Split`` on :data:`QWEN2_PATTERN`
#: (isolated), then ``ByteLevel`` without its own regex (its other fields, such as ``trim_offsets``, change offsets
#: only).
QWEN2_STEPS = [{"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "use_regex": False, "add_prefix_space": False}]


def splits_like_qwen2(model_dir: str | Path) -> bool:
    """Whether ``model_dir/tokenizer.json`` pre-tokenizes exactly as Qwen2's (:data:`QWEN2_STEPS`)."""
    path = Path(model_dir) / "tokenizer.json"
    pre = (json.loads(path.read_text(encoding="utf-8")).get("pre_tokenizer") or {}) if path.is_file() else {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    return len(steps) == 2 and [{k: s.get(k) for k in want} for s, want in zip(steps, QWEN2_STEPS)] == QWEN2_STEPS


def main(argv: list[str]) -> None:
    llama_cpp_dir, model_dir, outfile, outtype = argv
    sys.path[:0] = [llama_cpp_dir, str(Path(llama_cpp_dir) / "gguf-py")]
    import conversion.base as base  # the converter's own package, beside convert_hf_to_gguf.py

    known = base.TextModel.get_vocab_base_pre
    qwen2_split = splits_like_qwen2(model_dir)

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            if qwen2_split:
                return "qwen2"
            raise

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", outtype]
    convert_hf_to_gguf.main()


def quantize(source: str, out_file: str, quant: str, threads: str) -> None:
    """:func:`grpo_kit.policy.llama_cpp.quantize_gguf`'s work, in the child process it starts (``threads``: 0 for all
    cores).

    Raises:
        RuntimeError: llama.cpp returned an error.
    """
    import llama_cpp  # installed, or on the path the parent gives (grpo_kit.policy.llama_cpp._child_env)

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant.upper()}")
    params.nthread = int(threads)
    code = llama_cpp.llama_model_quantize(source.encode(), out_file.encode(), params)
    if code != 0:
        raise RuntimeError(f"llama_model_quantize returned {code}")


if __name__ == "__main__":
    if sys.argv[1] == "--quantize":
        quantize(*sys.argv[2:])
    else:
        main(sys.argv[1:])
