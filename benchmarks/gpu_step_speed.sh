#!/usr/bin/env bash
# Issue 28 on one GPU, in one call: examples/run_care.py against a plain PyTorch loop on the same ResNet-18, B = 512,
# bf16, 32-px images, both stems (benchmarks/bench_example_throughput.py), plus CARE and torch.compile.
#
# Needs: torch, transformers, timm, accelerate on the machine; this package and `datasets` (+ dill, multiprocess)
# as wheels in .whl/ (the GPU machines have no `datasets` and no network):
#   pip wheel --no-deps -w .whl .
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl \
#       datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
# Writes to $OUT (default /tmp/gpu_step_speed): results.jsonl (one line per run), log.txt, the model card of one run.
# A smoke run on a CPU: BATCH=16 STEPS=12 PER_CLASS=20 PRECISION= SITE=none bash benchmarks/gpu_step_speed.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_step_speed}
BATCH=${BATCH:-512} STEPS=${STEPS:-80} PER_CLASS=${PER_CLASS:-500} PRECISION=${PRECISION---bf16} SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
if [ "$SITE" != none ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
    export PYTHONPATH=$SITE
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv 2>/dev/null
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=warning OMP_NUM_THREADS=8
python3 -c "import torch, transformers, timm, datasets, pyarrow, hf_contrast; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'timm', timm.__version__, 'datasets', datasets.__version__, \
'pyarrow', pyarrow.__version__)" || exit 1

FOLDER=/tmp/images32
python3 - "$FOLDER" "$PER_CLASS" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root, per_class, rng = sys.argv[1], int(sys.argv[2]), np.random.default_rng(0)
for c in range(10):  # 10 classes of random 32-px RGB PNGs
    os.makedirs(f"{root}/class{c}", exist_ok=True)
    for i in range(per_class):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(f"{root}/class{c}/{i}.png")
EOF

BENCH="python3 benchmarks/bench_example_throughput.py"
RESULTS="$OUT/results.jsonl"
for stem in "" "--small_image_stem"; do
    timeout 120 $BENCH plain --json "$RESULTS" --batch_size "$BATCH" $PRECISION --steps 60 $stem
done
# run_care as a user runs it (views on the device by default on a GPU), short evaluation at the end
COMMON=(--dataset "$FOLDER" --per_device_train_batch_size "$BATCH" $PRECISION --max_steps "$STEPS" --eval_strategy no
        --save_strategy no --max_eval_samples 512 --num_probe_images 64 --num_augmentations 2 --projection_plot pca
        --disable_tqdm true --overwrite_output_dir)
run() {  # NAME TIMEOUT ARGS...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" $BENCH example --json "$RESULTS" -- examples/run_care.py --output_dir "/tmp/runs/$name" \
        "${COMMON[@]}" "$@" || echo "run $name failed or timed out"
}
run simclr_imagenet_stem 150 --method simclr --small_image_stem false
run simclr_small_stem 150 --method simclr --small_image_stem
cp /tmp/runs/simclr_small_stem/README.md "$OUT/card_simclr_small_stem.md" 2>/dev/null
run care_small_stem 150 --method care --small_image_stem
run simclr_small_stem_compile 240 --method simclr --small_image_stem --torch_compile
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    what = r.get("command", f"plain loop, small_image_stem={r.get('small_image_stem')}")
    print(f"{r['images_per_s']:10.0f} img/s  {r['period_ms']:7.1f} ms/step  {what[:160]}")
EOF
