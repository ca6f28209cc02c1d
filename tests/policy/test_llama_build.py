"""The llama.cpp the Makefile builds (``make install-llama``) runs on every x86-64 CI machine: it is built portably
(``GGML_NATIVE=OFF``: SSE4.2, AVX, AVX2, FMA, F16C; no AVX-512, no AMX), and it decodes a q4_k_m GGUF whatever the
CPU. A native build on an Intel Xeon with AMX tiles died with SIGILL in its quantized kernels: the
decode runs in a child process here, so an illegal instruction fails this test instead of killing pytest.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from grpo_kit.policy.llama_cpp import _child_env, import_llama_cpp, llama_dir
from tests.llama import needs_llama

#: Instruction sets a portable build must not have compiled in: a CPU without them would die on the first use.
NOT_PORTABLE = ("AVX512", "AMX", "AVX_VNNI", "AVX512_BF16", "AVX512_VNNI", "AVX512_VBMI")


@needs_llama
def test_the_built_llama_cpp_uses_only_the_portable_instruction_sets():
    info = import_llama_cpp().llama_print_system_info().decode()
    features = dict(re.findall(r"(\w+) = (\d+)", info))
    assert features.get("AVX2") == "1", info  # the portable baseline is compiled in ...
    assert not [f for f in features if f.startswith(NOT_PORTABLE) and features[f] == "1"], info  # ... and no more


@needs_llama
def test_the_built_llama_cpp_decodes_a_q4_k_m_gguf_on_this_cpu(tmp_path):
    from grpo_kit.policy.llama_cpp import convert_to_gguf, quantize_gguf
    from grpo_kit.policy.tiny import TinyPolicySpec, build_tiny_policy

    # rows of 256 columns, so that llama.cpp keeps its k-quant types (q4_K, q6_K) rather than falling back
    spec = TinyPolicySpec(vocab_size=512, hidden_size=256, num_layers=1, num_heads=4, num_kv_heads=1,
                          intermediate_size=512, max_positions=256)
    model, tokenizer = build_tiny_policy(["one plus one is two", "two plus two is four"] * 50, seed=0, spec=spec)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    full = convert_to_gguf(tmp_path / "model", tmp_path / "model-f32.gguf", "f32")
    gguf = quantize_gguf(full, tmp_path / "model-q4_k_m.gguf", "q4_k_m", threads=1)
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(llama_dir() / "llama.cpp" / "gguf-py")!r})
        import gguf, llama_cpp
        types = {{t.tensor_type.name for t in gguf.GGUFReader({str(gguf)!r}).tensors}}
        print("types", sorted(types))
        llm = llama_cpp.Llama({str(gguf)!r}, n_ctx=64, n_threads=1, verbose=False)
        out = llm("one plus one is", max_tokens=4, temperature=0.0)
        print("decoded", len(out["choices"][0]["text"]) >= 0, out["usage"]["completion_tokens"])
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=_child_env(),
                          timeout=300)
    assert done.returncode == 0, (f"the built llama.cpp died decoding a q4_k_m GGUF (exit {done.returncode}; -4 is "
                                  f"SIGILL, an instruction this CPU does not run):\n{done.stderr[-3000:]}")
    assert "Q4_K" in done.stdout and "decoded True" in done.stdout, done.stdout + done.stderr[-2000:]
