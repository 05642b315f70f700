#!/usr/bin/env bash
# One GPU call after benchmarks/gpu_step_speed.sh (same wheels in .whl/, same 32-px folder): (1) no synchronising
# operation inside a training step (torch.cuda.set_sync_debug_mode("warn") over the training of run_care, SimCLR
# and CARE, each one named by its frames), (2) every image method's step at the papers' settings (B = 256, small-image stem, bf16; the step time
# a plan of 100-epoch runs is sized from), (3) torch.compile on the ImageNet stem.
# A smoke run on a CPU: BATCH=16 STEPS=8 PER_CLASS=20 PRECISION= SITE=none bash benchmarks/gpu_methods.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_methods}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
BATCH=${BATCH:-256} STEPS=${STEPS:-40} PER_CLASS=${PER_CLASS:-500} PRECISION=${PRECISION---bf16} SITE=${SITE:-/tmp/site}
if [ "$SITE" != none ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
    export PYTHONPATH=$SITE
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=8
FOLDER=/tmp/images32
python3 - "$FOLDER" "$PER_CLASS" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root, per_class, rng = sys.argv[1], int(sys.argv[2]), np.random.default_rng(0)
for c in range(10):
    os.makedirs(f"{root}/class{c}", exist_ok=True)
    for i in range(per_class):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(f"{root}/class{c}/{i}.png")
PY
RESULTS="$OUT/results.jsonl"
COMMON=(--dataset "$FOLDER" $PRECISION --max_steps "$STEPS" --eval_strategy no --save_strategy no
        --max_eval_samples 256 --num_probe_images 32 --num_augmentations 2 --projection_plot pca --disable_tqdm true
        --overwrite_output_dir --logging_steps 10)
run() {  # NAME TIMEOUT [bench flags --] run_care flags...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python3 benchmarks/bench_example_throughput.py example --warmup 5 --json "$RESULTS" "$@" \
        --output_dir "/tmp/runs/$name" "${COMMON[@]}" 2>&1 | grep -E '^\{"mode"|Traceback|Error:' \
        || echo "run $name failed or timed out"
}
for method in simclr care; do
    run "sync_$method" 90 --sync_debug -- examples/run_care.py --method "$method" --small_image_stem \
        --per_device_train_batch_size "$BATCH"
done
for method in care_moco spectral vicreg binary_nce supcon ocl align_uniform; do
    run "$method" 90 -- examples/run_care.py --method "$method" --small_image_stem --per_device_train_batch_size "$BATCH"
done
run simo 90 -- examples/run_care.py --method simo --small_image_stem --classes_per_batch 4 \
    --samples_per_class $((BATCH / 4)) --per_device_train_batch_size "$BATCH"
run compile_imagenet_stem 200 -- examples/run_care.py --method simclr --small_image_stem false --torch_compile \
    --per_device_train_batch_size 512
python3 - "$RESULTS" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['period_ms']:7.1f} ms/step {r['images_per_s']:8.0f} img/s syncs in steps={r.get('syncs_inside_steps', '-')} "
          f"{' '.join(a for a in r['command'].split() if not a.startswith('/tmp'))[:150]}")
    for stack in r.get("sync_stacks", []):
        print("      ", stack)
PY
