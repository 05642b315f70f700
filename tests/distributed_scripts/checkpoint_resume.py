"""2 processes: a run killed while rank 0 writes a checkpoint resumes exactly, from the newest complete one.

Launched by ``tests/distributed/test_resume_distributed.py`` as::

    accelerate launch --multi_gpu --num_processes 2 checkpoint_resume.py OUT_DIR PHASE

``PHASE`` is ``full`` (6 steps, a checkpoint every 2, ``save_total_limit=1``), ``killed`` (the same run in
``OUT_DIR/run``; rank 0 writes half of ``checkpoint-4/optimizer.pt`` and dies with ``os._exit``, as under
SIGKILL) or ``resumed`` (``resume_from_checkpoint=True`` in ``OUT_DIR/run``). Random views (each process's
RNG) make the resume exact only if every process's RNG state comes back. Rank 0 saves the final parameters
and losses to ``OUT_DIR/<phase>.pt``.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from process_end import finish_process  # noqa: E402
from trainer_utils import image_dataset, parameters, training_args, vit_encoder  # noqa: E402

from hf_contrast import distributed  # noqa: E402
from hf_contrast.training import SimCLRTrainer  # noqa: E402


def _die_while_writing(path_suffix: str) -> None:
    """Rank 0 writes half of the file ending with ``path_suffix``, then exits at once."""
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if distributed.rank() == 0 and str(f).endswith(path_suffix):
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            Path(f).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            os._exit(9)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save


def main() -> None:
    out_dir, phase = Path(sys.argv[1]), sys.argv[2]
    output_dir = out_dir / ("full" if phase == "full" else "run")
    args = training_args(
        output_dir, max_steps=6, per_device_train_batch_size=4, save_strategy="steps", save_steps=2,
        save_total_limit=1, learning_rate=1e-2, full_determinism=True,
    )  # fmt: skip
    trainer = SimCLRTrainer(
        model=vit_encoder(seed=1 if phase == "resumed" else 0), args=args, train_dataset=image_dataset(n=16)
    )
    if phase == "killed":
        _die_while_writing(os.path.join("checkpoint-4", "optimizer.pt"))
    trainer.train(resume_from_checkpoint=True if phase == "resumed" else None)
    if distributed.rank() == 0:
        losses = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
        torch.save({"parameters": parameters(trainer.model), "losses": losses}, out_dir / f"{phase}.pt")
    finish_process()


if __name__ == "__main__":
    main()
