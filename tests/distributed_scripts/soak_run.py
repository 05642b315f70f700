"""One leg of the soak test: SimCLR on tiny data, a checkpoint every ``--save_steps``, resumed from the newest
complete checkpoint when one exists (``train(resume_from_checkpoint=True)``, the public route).

Launched by ``tests/distributed/test_soak.py`` as a plain process (or by ``torchrun`` with 2 processes) that the
test kills with SIGKILL at random moments. Prints ``RSS <step> <bytes>`` after every checkpoint so the test can
follow the resident memory, and writes ``final.safetensors`` (the encoder's parameters) when training ends.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402  (accelerate's dependency)
import torch  # noqa: E402
from process_end import finish_process  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from trainer_utils import image_dataset, training_args, vit_encoder  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from hf_contrast.training import SimCLRTrainer  # noqa: E402


class _ReportMemory(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        print(f"RSS {state.global_step} {psutil.Process().memory_info().rss}", flush=True)


def _die_while_writing(folder: str) -> None:
    """SIGKILL this process (rank 0 only) in the middle of writing ``folder``: after the weights, as the
    optimizer state is written. The launcher then stops the other rank: a kill during a save."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    save = torch.save

    def save_or_die(obj, f, *args, **kwargs):  # noqa: ANN001, ANN202
        if isinstance(f, (str, os.PathLike)) and folder in str(f) and str(f).endswith("optimizer.pt"):
            os.kill(os.getpid(), signal.SIGKILL)
        return save(obj, f, *args, **kwargs)

    torch.save = save_or_die


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=2000)
    parser.add_argument("--save_steps", type=int, default=50)
    parser.add_argument("--die_in_save_at", type=int, default=None, help="SIGKILL rank 0 while it writes checkpoint-N")
    options = parser.parse_args()
    if options.die_in_save_at is not None:
        _die_while_writing(f"checkpoint-{options.die_in_save_at}")
    torch.set_num_threads(1)
    print("LEG", flush=True)
    args = training_args(
        options.output_dir, per_device_train_batch_size=4, max_steps=options.max_steps, save_strategy="steps",
        save_steps=options.save_steps, save_total_limit=2, logging_steps=options.save_steps, learning_rate=1e-3,
        full_determinism=True, image_size=16,
    )  # fmt: skip
    trainer = SimCLRTrainer(
        model=vit_encoder(img_size=16, projection_dim=4),
        args=args,
        train_dataset=image_dataset(n=32, size=16),
        callbacks=[_ReportMemory()],
    )
    started = (
        any(name.startswith("checkpoint-") for name in os.listdir(options.output_dir))
        if os.path.isdir(options.output_dir)
        else False
    )
    trainer.train(resume_from_checkpoint=True if started else None)
    if trainer.args.should_save:
        state = {k: v.detach().contiguous() for k, v in trainer.model.state_dict().items()}
        save_file(state, os.path.join(options.output_dir, "final.safetensors"))
    finish_process()  # also when launched as one plain process: the same end, whatever the launcher


if __name__ == "__main__":
    main()
