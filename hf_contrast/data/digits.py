"""The embedded default image data: scikit-learn's handwritten digits as a ``datasets.Dataset``.

The examples must run on a fresh machine with no network, so their default data are real images
that ship inside an installed dependency: the 1,797 8×8 grey-scale digits of scikit-learn
(UCI ML hand-written digits), up-sampled to RGB PIL images of ``image_size`` pixels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensor_checks import MAX_IMAGE_SIDE, MAX_SEED, check_int, check_positive, check_unit_interval

if TYPE_CHECKING:
    import datasets

__all__ = ["load_digits_dataset"]


def _require_sklearn():
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "The embedded digits dataset needs scikit-learn: `pip install 'hf-contrast[examples]'` "
            "(or `pip install scikit-learn`)."
        ) from err
    return load_digits


def load_digits_dataset(image_size: int = 32, test_size: float = 0.2, seed: int = 0) -> datasets.DatasetDict:
    """Load scikit-learn's digits as a ``datasets.DatasetDict`` with ``train`` and ``test`` splits.

    Args:
        image_size: Side of the square RGB images, in ``[8, 65536]`` (bilinear up-sampling of the 8×8 digits).
        test_size: Fraction of each class held out for ``test``, in ``(0, 1)``.
        seed: Seed of the stratified split, an integer in ``[0, 2**63 - 2]``.

    Returns:
        ``DatasetDict`` with columns ``image`` (PIL RGB, ``image_size``²) and ``label``
            (``ClassLabel`` with names ``"0"`` … ``"9"``).

    Raises:
        ValueError: if ``image_size`` is not in ``[8, 65536]``, ``test_size`` not in ``(0, 1)`` or ``seed`` out of
            range.

    Examples:
        >>> ds = load_digits_dataset(image_size=16)  # doctest: +SKIP
        >>> ds["train"][0]["image"].size, ds["train"].features["label"].num_classes  # doctest: +SKIP
        ((16, 16), 10)
    """
    import datasets
    from PIL import Image

    check_int("image_size", image_size, 8, MAX_IMAGE_SIDE, fix="the digits are 8×8.")
    check_unit_interval("test_size", check_positive("test_size", test_size), include_one=False)
    check_int("seed", seed, 0, MAX_SEED)
    digits = _require_sklearn()()
    pixels = (digits.images / 16.0 * 255.0).round().astype(np.uint8)  # (N, 8, 8) in [0, 255]
    labels = digits.target.astype(np.int64)

    rng = np.random.default_rng(seed)
    test_mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n_test = max(1, int(round(test_size * len(idx))))
        test_mask[rng.choice(idx, size=n_test, replace=False)] = True

    def to_image(a: np.ndarray) -> Image.Image:
        img = Image.fromarray(a, mode="L").resize((image_size, image_size), Image.BILINEAR)
        return img.convert("RGB")

    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in range(10)])}
    )

    def split(mask: np.ndarray, name: str) -> datasets.Dataset:
        idx = np.flatnonzero(mask)
        return datasets.Dataset.from_dict(
            {"image": [to_image(pixels[i]) for i in idx], "label": labels[idx].tolist()},
            info=datasets.DatasetInfo(features=features, dataset_name="sklearn-digits"),  # the model cards' name
            split=name,
        )

    return datasets.DatasetDict({"train": split(~test_mask, "train"), "test": split(test_mask, "test")})
