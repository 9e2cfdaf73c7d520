#!/usr/bin/env bash
# Builds the container images and checks the CPU one serves: `docker build` of Dockerfile, a
# container started from it must turn healthy (its HEALTHCHECK polls /health) and answer /embed
# with 384-float vectors; Dockerfile.cuda is built too with RAGGED_DOCKER_CUDA=1 (its base image is
# several GB) and run when the host has a GPU for Docker (`docker run --gpus all`).
# scripts/run-tests.sh runs this where a Docker daemon answers and says why it skips it otherwise.
# Exit 0 when every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${RAGGED_DOCKER_TAG:-ragged-test}
name="$TAG-$$"
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "docker build -f Dockerfile -t $TAG:cpu ."
docker build -q -f Dockerfile -t "$TAG:cpu" . >/dev/null

wait_healthy() { # container: up to 300 s for the HEALTHCHECK to report healthy
	local st
	for _ in $(seq 300); do
		st=$(docker inspect -f '{{.State.Health.Status}}' "$1" 2>/dev/null || echo gone)
		[ "$st" = healthy ] && return 0
		[ "$st" = gone ] || [ "$(docker inspect -f '{{.State.Running}}' "$1")" = false ] && break
		sleep 1
	done
	echo "container $1 did not turn healthy (status $st); its log:"; docker logs "$1" 2>&1 | tail -20
	return 1
}

check_embed() { # container: POST /embed from inside it, expect one 384-float vector
	local out
	out=$(docker exec "$1" curl -fsS -H 'Content-Type: application/json' \
		-d '{"inputs": ["hello from the container"]}' http://127.0.0.1:8080/embed)
	n=$(printf '%s' "$out" | tr -cd ',' | wc -c)
	[ "$n" -eq 383 ] || { echo "unexpected /embed answer: ${out:0:200}"; return 1; }
	[ "$(docker exec "$1" id -u)" != 0 ] || { echo "the container runs as root"; return 1; }
}

docker run -d --name "$name" "$TAG:cpu" >/dev/null
wait_healthy "$name"
check_embed "$name"
cleanup
echo "Dockerfile: built, healthy, /embed answers, non-root"

if [ "${RAGGED_DOCKER_CUDA:-0}" = 1 ]; then
	echo "docker build -f Dockerfile.cuda -t $TAG:cuda ."
	docker build -q -f Dockerfile.cuda -t "$TAG:cuda" . >/dev/null
	if docker run --rm --gpus all "$TAG:cuda" --help >/dev/null 2>&1; then
		docker run -d --gpus all --name "$name" "$TAG:cuda" >/dev/null
		wait_healthy "$name"
		check_embed "$name"
		cleanup
		echo "Dockerfile.cuda: built, healthy on the GPU, /embed answers"
	else
		echo "Dockerfile.cuda: built (no GPU for Docker here: not run)"
	fi
else
	echo "Dockerfile.cuda: not built (set RAGGED_DOCKER_CUDA=1; the CUDA devel image is several GB)"
fi
