#!/usr/bin/env bash
# Issue 28 on one GPU, in one call: the CUDA-graph tests, the device views alone, examples/run_care.py against a plain
# PyTorch loop on the same ResNet-18, B = 512, bf16, 32-px images, both stems (benchmarks/bench_example_throughput.py),
# torch.compile, then where the time goes (torch.profiler, cProfile) and every synchronising operation of a run named
# by the frames that issued it.
#
# Needs: torch, transformers, timm, accelerate on the machine; this package and `datasets` (+ dill, multiprocess) as
# wheels in .whl/ (the GPU machines have no `datasets` and no network; a wheel carries the model-card templates):
#   pip wheel --no-deps -w .whl .
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl \
#       datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pytest pluggy iniconfig pygments packaging \
#       hypothesis sortedcontainers
# Writes to $OUT (default /tmp/gpu_step_speed): results.jsonl (one line per run), log.txt, the model card of one run,
# trace.txt and profile_simclr.txt.
# Runs in order of importance and skips what would not end within BUDGET seconds (default 480); RUNS picks groups
# (default all: "tests imagenet small compile compile_graphs diagnostics").
# A smoke run on a CPU: BATCH=16 STEPS=12 PER_CLASS=20 PRECISION= SITE=none bash benchmarks/gpu_step_speed.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_step_speed}
BATCH=${BATCH:-512} STEPS=${STEPS:-100} PER_CLASS=${PER_CLASS:-1000} PRECISION=${PRECISION---bf16}
SITE=${SITE:-/tmp/site} BUDGET=${BUDGET:-480} RUNS=${RUNS:-tests imagenet small compile compile_graphs diagnostics}
want() { [[ " $RUNS " == *" $1 "* ]]; }
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
if [ "$SITE" != none ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
[ "$SITE" != none ] && export PYTHONPATH=$SITE
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv 2>/dev/null
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=warning OMP_NUM_THREADS=8
(cd /tmp && python3 -c "import torch, transformers, timm, datasets, hf_contrast; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'timm', timm.__version__, 'datasets', datasets.__version__, \
'hf_contrast from', hf_contrast.__file__)") || exit 1

FOLDER=/tmp/images32
python3 - "$FOLDER" "$PER_CLASS" <<'EOF'
import os, sys
from multiprocessing import Pool
import numpy as np
from PIL import Image
root, per_class = sys.argv[1], int(sys.argv[2])
def write(c):  # one class of random 32-px RGB PNGs (10 classes, one process each)
    rng = np.random.default_rng(c)
    os.makedirs(f"{root}/class{c}", exist_ok=True)
    for i in range(per_class):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(f"{root}/class{c}/{i}.png")
with Pool(10) as pool:
    pool.map(write, range(10))
EOF

BENCH="python3 benchmarks/bench_example_throughput.py"
RESULTS="$OUT/results.jsonl"
# run_care as a user runs it (views on the device by default on a GPU), a short evaluation at the end
COMMON=(--dataset "$FOLDER" --per_device_train_batch_size "$BATCH" $PRECISION --eval_strategy no --save_strategy no
        --max_eval_samples 512 --num_probe_images 64 --num_augmentations 2 --projection_plot pca --disable_tqdm true
        --overwrite_output_dir)
run() {  # NAME TIMEOUT BENCH-FLAGS... -- RUN_CARE-FLAGS...
    local name=$1 limit=$2
    shift 2
    if (( SECONDS + limit > BUDGET )); then echo "run $name skipped: the budget's end is near"; return; fi
    echo "== $name (at ${SECONDS}s)"
    timeout "$limit" $BENCH example --json "$RESULTS" "$@" --output_dir "/tmp/runs/$name" "${COMMON[@]}" \
        || echo "run $name failed or timed out"
}
plain() {  # plain-loop flags
    echo "== plain $* (at ${SECONDS}s)"
    timeout 90 $BENCH plain --json "$RESULTS" --batch_size "$BATCH" $PRECISION --steps 60 "$@" || echo "plain $* failed"
}
# 0. the tests that need a GPU (pytest and hypothesis travel as wheels too; run from tests/ so that the package
#    imported is the installed wheel, with its model-card templates): the CUDA graphs, the gradient cache's replay in
#    autograd's device thread; the device views alone
if want tests && [ "$SITE" != none ]; then
    (cd tests && python3 -m pytest -q -p no:cacheprovider views/test_cuda_graphs.py training/test_gradient_cache.py 2>&1 | tail -15)
fi
want tests && { timeout 60 $BENCH views --json "$RESULTS" --batch_size "$BATCH" --steps 60 || echo "views failed"; }
# 1. the floor and the example, ImageNet stem (the view pass replayed from a CUDA graph); the throughput over steps
#    10..STEPS (no synchronisation in between), and the host's milliseconds per step in the step's functions
if want imagenet; then
    plain
    run simclr_imagenet_stem 100 --host_breakdown -- examples/run_care.py --method simclr --small_image_stem false \
        --max_steps "$STEPS"
fi
# 2. the papers' stem, CARE
if want small; then
    plain --small_image_stem
    run simclr_small_stem 100 --host_breakdown -- examples/run_care.py --method simclr --small_image_stem \
        --max_steps "$STEPS"
    cp /tmp/runs/simclr_small_stem/README.md "$OUT/card_simclr_small_stem.md" 2>/dev/null
    run care_small_stem 100 --host_breakdown -- examples/run_care.py --method care --small_image_stem \
        --max_steps "$STEPS"
fi
# 3. the model and the view pass compiled (whole batches only: an epoch's shorter last batch would recompile), by
#    default and with CUDA graphs of the model's forward and backward (mode reduce-overhead)
if want compile; then
    run simclr_imagenet_stem_compile 170 -- examples/run_care.py --method simclr --small_image_stem false \
        --torch_compile --dataloader_drop_last --max_steps "$STEPS"
fi
if want compile_graphs; then
    run simclr_imagenet_stem_compile_graphs 170 -- examples/run_care.py --method simclr --small_image_stem false \
        --torch_compile --torch_compile_mode reduce-overhead --dataloader_drop_last --max_steps "$STEPS"
fi
# 4. where the time goes: the device's kernel time per step (torch.profiler over 5 steps), the host's functions
#    (cProfile), every synchronising operation with the frames that issued it
if want diagnostics; then
    plain --trace "$OUT/trace.txt"
    run trace_simclr 100 --trace "$OUT/trace.txt" -- examples/run_care.py --method simclr --small_image_stem false \
        --max_steps 40
    run profile_simclr 100 --profile "$OUT/profile_simclr.txt" -- examples/run_care.py --method simclr \
        --small_image_stem false --max_steps 60
    run sync_simclr 90 --sync_debug -- examples/run_care.py --method simclr --small_image_stem false --max_steps 30
fi
python3 - "$RESULTS" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["mode"] == "views":
        print(f"views alone (B = {r['batch_size']}, two views): eager {r['eager_period_ms']:.2f} ms/call "
              f"(host {r['eager_host_ms']:.2f} ms), CUDA graph {r['graph_period_ms']:.2f} ms/call "
              f"(host {r['graph_host_ms']:.2f} ms)")
        print("       host ms:", {k: v for k, v in r.items() if k.startswith(("parameters_drawn", "gradient_norm"))})
        continue
    what = r.get("command", f"plain loop, small_image_stem={r.get('small_image_stem')}")
    what = " ".join(a for a in what.split() if not a.startswith("/tmp"))
    each = " (sync each step)" if r.get("sync_each_step") else ""
    each += " (5 steps profiled: not a throughput)" if r.get("traced") else ""
    print(f"{r['images_per_s']:10.0f} img/s {r['period_ms']:7.1f} ms/step{each} {what[:150]}")
    if "slowest_steps_ms" in r:
        print(f"       median step {r['median_step_ms']:.1f} ms; slowest (step: ms) {r['slowest_steps_ms']}")
        print(f"       host phases (median ms): {r.get('host_phases_ms')}")
    if "host_breakdown_ms" in r:
        print(f"       host ms per step in: {r['host_breakdown_ms']}")
    for stack in r.get("sync_stacks", []):
        print("      ", stack)
EOF
