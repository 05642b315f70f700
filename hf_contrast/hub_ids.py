"""Whether a string can be a Hugging Face Hub repository id (``name`` or ``user/name``).

Shared by the doors that take "a local path or a Hub id" (the data loaders' ``path_or_id``,
``ContrastiveEncoder.from_backbone``'s ``backbone``, ``from_pretrained``'s
``pretrained_model_name_or_path``): a string that is neither an existing path nor a valid id is the
caller's mistake (an ``InputError``), not a Hub request that fails with huggingface_hub's
``HFValidationError`` ('Repo id must use alphanumeric chars ...').

>>> is_hub_repo_id("bert-base-uncased"), is_hub_repo_id("user/name"), is_hub_repo_id(" "), is_hub_repo_id("a/b/c")
(True, True, False, False)
"""

from __future__ import annotations

__all__ = ["is_hub_repo_id"]


def is_hub_repo_id(text: str) -> bool:
    """``huggingface_hub.utils.validate_repo_id`` as a predicate (alphanumerics, ``-``, ``_``, ``.``; at most
    one ``/``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True
