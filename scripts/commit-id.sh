#!/usr/bin/env bash
# Prints the commit a benchmark or test result should name. A GPU machine gets the working tree
# with a stale .git (or none) and the real commit in .gpu_carry/COMMIT, written by
# scripts/pack-gpu-carry.sh; here the .gpu_carry left from the last packing may be older than
# HEAD. So: the carry's COMMIT unless this checkout's HEAD descends from it (then HEAD, with
# "+dirty" when tracked files differ), else HEAD, else "unknown".
# Usage: scripts/commit-id.sh [REPO_ROOT]
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
carry=$(cat "$ROOT/.gpu_carry/COMMIT" 2>/dev/null)
head=$(git -C "$ROOT" rev-parse --verify -q HEAD 2>/dev/null)
if [ -n "$head" ] && { [ -z "$carry" ] ||
	git -C "$ROOT" merge-base --is-ancestor "${carry%%+*}" "$head" 2>/dev/null; }; then
	git -C "$ROOT" diff --quiet HEAD -- . ':!.gpu_carry' 2>/dev/null || head="$head+dirty"
	echo "$head"
elif [ -n "$carry" ]; then
	echo "$carry"
else
	echo unknown
fi
