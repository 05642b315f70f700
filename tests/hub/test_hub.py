"""Hub round trips against the loopback stand-in (`tests/hub_server.py`).

Nothing here leaves 127.0.0.1: `use_hub_server` points `huggingface_hub` at the stand-in and
installs an HTTP client that refuses any other host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
import timm
import torch
from _tiny import tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from hub_server import HubServer, run_hub_server, use_hub_server
from huggingface_hub import HfApi, ModelCard, constants, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import get_session
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer, Trainer, TrainingArguments

from hf_contrast.hub import GENERATED_MARKER, ModelCardCallback, get_model_card_data, push_encoder_to_hub
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training.checkpointing import CheckpointingMixin
from hf_contrast.training.publishing import HubPublishingMixin

README = "---\nlicense: mit\nlibrary_name: hf_contrast\ntags:\n- hf_contrast\n---\n# A card\n"


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with HubServer(tmp_path / "hub") as server, use_hub_server(server.url, cache_dir=tmp_path / "cache") as refused:
        yield server
    assert refused == [], f"requests left loopback: {refused}"


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


# ----------------------------------------------------------------------------------------------
# The stand-in itself
# ----------------------------------------------------------------------------------------------


def test_upload_folder_then_download_round_trip(hub: HubServer, tmp_path: Path) -> None:
    api = HfApi()
    url = api.create_repo("user/tiny")
    assert url.repo_id == "user/tiny" and url.startswith(hub.url)
    assert api.create_repo("user/tiny", exist_ok=True).repo_id == "user/tiny"
    weights = bytes(range(256)) * 40
    folder = _folder(tmp_path / "up", {"README.md": README.encode(), "config.json": b'{"a": 1}', "sub/w.bin": weights})
    commit = api.upload_folder(repo_id="user/tiny", folder_path=folder, commit_message="first")
    assert commit.commit_url == f"{hub.url}/user/tiny/commit/{commit.oid}"
    assert sorted(api.list_repo_files("user/tiny")) == [".gitattributes", "README.md", "config.json", "sub/w.bin"]
    path = hf_hub_download("user/tiny", "sub/w.bin")
    assert Path(path).read_bytes() == weights
    assert Path(path).is_relative_to(tmp_path / "cache")  # the fixture's fresh cache, not the user's
    info = api.model_info("user/tiny")
    assert info.sha == commit.oid
    assert info.card_data.license == "mit" and info.card_data.library_name == "hf_contrast"
    assert {s.rfilename: s.size for s in info.siblings}["sub/w.bin"] == len(weights)
    # contents went inline in the commit: no LFS or Xet endpoint was needed
    assert ("POST", "/api/models/user/tiny/commit/main") in hub.requests
    assert not any("lfs" in path or "xet" in path for _, path in hub.requests)


def test_new_commit_moves_main_and_old_commit_stays_resolvable(hub: HubServer, tmp_path: Path) -> None:
    api = HfApi()
    api.create_repo("user/versions")
    first = api.upload_file(path_or_fileobj=b"v1", path_in_repo="f.txt", repo_id="user/versions")
    second = api.upload_file(path_or_fileobj=b"v2", path_in_repo="f.txt", repo_id="user/versions")
    assert first.oid != second.oid
    assert Path(hf_hub_download("user/versions", "f.txt")).read_bytes() == b"v2"
    assert Path(hf_hub_download("user/versions", "f.txt", revision=first.oid)).read_bytes() == b"v1"
    api.delete_file("f.txt", repo_id="user/versions")
    assert api.list_repo_files("user/versions") == [".gitattributes"]


def test_pull_request_and_branch(hub: HubServer) -> None:
    api = HfApi()
    api.create_repo("user/prs")
    pr = api.upload_file(path_or_fileobj=b"x", path_in_repo="pr.txt", repo_id="user/prs", create_pr=True)
    assert pr.pr_url == f"{hub.url}/user/prs/discussions/1"
    assert "pr.txt" not in api.list_repo_files("user/prs")
    assert "pr.txt" in api.list_repo_files("user/prs", revision="refs/pr/1")
    api.create_branch("user/prs", branch="dev")
    api.upload_file(path_or_fileobj=b"d", path_in_repo="dev.txt", repo_id="user/prs", revision="dev")
    assert "dev.txt" in api.list_repo_files("user/prs", revision="dev")
    assert "dev.txt" not in api.list_repo_files("user/prs")


def test_errors_are_the_hubs_typed_errors(hub: HubServer) -> None:
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("user/missing")
    api.create_repo("user/errors")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("user/errors", "nope.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("user/errors", ".gitattributes", revision="no-such-branch")


def test_invalid_readme_metadata_is_rejected(hub: HubServer) -> None:
    api = HfApi()
    api.create_repo("user/bad-card")
    with pytest.raises(ValueError, match="Invalid metadata in README.md"):
        api.upload_file(
            path_or_fileobj=b"---\nlicense: [unclosed\n---\n", path_in_repo="README.md", repo_id="user/bad-card"
        )


def test_repositories_persist_across_server_restarts(tmp_path: Path) -> None:
    for content in (b"first run", None):
        with (
            run_hub_server(tmp_path / "hub") as url,
            use_hub_server(url, cache_dir=tmp_path / f"cache{content is None}"),
        ):
            if content is not None:
                HfApi().create_repo("user/persist")
                HfApi().upload_file(path_or_fileobj=content, path_in_repo="a.txt", repo_id="user/persist")
            else:
                assert Path(hf_hub_download("user/persist", "a.txt")).read_bytes() == b"first run"


def test_only_loopback_is_reachable(tmp_path: Path) -> None:
    with run_hub_server(tmp_path / "hub") as url, use_hub_server(url, cache_dir=tmp_path / "cache") as refused:
        with pytest.raises(Exception, match="refuses a request to http://10.255.255.1"):
            get_session().get("http://10.255.255.1/api/models/user/x")
        assert refused == ["http://10.255.255.1/api/models/user/x"]
        # the module-level HfApi behind `huggingface_hub.model_info` was created at import: re-pointed too
        HfApi().create_repo("user/x")
        assert huggingface_hub.model_info("user/x").id == "user/x"
        assert len(refused) == 1


def test_use_hub_server_restores_the_environment(tmp_path: Path) -> None:
    before = (
        constants.ENDPOINT,
        constants.HF_HUB_OFFLINE,
        constants.HUGGINGFACE_CO_URL_TEMPLATE,
        constants.HF_HUB_CACHE,
    )
    with run_hub_server(tmp_path / "hub") as url, use_hub_server(url, cache_dir=tmp_path / "cache"):
        assert constants.ENDPOINT == url and constants.HF_HUB_OFFLINE is False
        assert ModelCard  # imported names keep working inside the block
    assert (
        constants.ENDPOINT,
        constants.HF_HUB_OFFLINE,
        constants.HUGGINGFACE_CO_URL_TEMPLATE,
        constants.HF_HUB_CACHE,
    ) == before


def test_use_hub_server_rejects_a_remote_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`url` must be a loopback"):
        with use_hub_server("https://huggingface.co", cache_dir=tmp_path):
            pass


# ----------------------------------------------------------------------------------------------
# Encoders pushed to the stand-in and loaded back with hf_contrast, timm, transformers and
# sentence-transformers
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def module_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    root = tmp_path_factory.mktemp("hub")
    with HubServer(root / "hub") as server, use_hub_server(server.url, cache_dir=root / "cache") as refused:
        yield server
    assert refused == [], f"requests left loopback: {refused}"


@pytest.fixture(scope="module")
def pushed_vision(module_hub: HubServer) -> tuple[object, torch.Tensor, str]:
    torch.manual_seed(0)
    encoder = tiny_timm_encoder().eval()
    data = get_model_card_data(encoder)
    data.license, data.objective_name = "mit", "CARE"
    data.train_datasets = [{"name": "digits", "id": "user/digits", "size": 16}]
    data.set_metrics({"eval_uniformity": -1.5}, step=10)
    commit = push_encoder_to_hub(encoder, "user/tiny-vision")
    return encoder, commit, "user/tiny-vision"


@pytest.fixture(scope="module")
def pushed_text(module_hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str]:
    torch.manual_seed(0)
    encoder = tiny_text_encoder(tiny_tokenizer(tmp_path_factory.mktemp("vocab"))).eval()
    get_model_card_data(encoder).language = "en"
    push_encoder_to_hub(encoder, "user/tiny-text")
    return encoder, "user/tiny-text"


def test_push_layout_and_commit_url(module_hub: HubServer, pushed_vision: tuple) -> None:
    _, commit, repo_id = pushed_vision
    assert commit == f"{module_hub.url}/{repo_id}/commit/{commit.oid}"
    files = set(HfApi().list_repo_files(repo_id))
    assert {
        "README.md",
        "config.json",
        "model.safetensors",
        "hf_contrast/config.json",
        "hf_contrast/model.safetensors",
    } <= files


def test_pushed_vision_encoder_loads_with_hf_contrast(pushed_vision: tuple) -> None:
    encoder, _, repo_id = pushed_vision
    loaded = ContrastiveEncoder.from_pretrained(repo_id).eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected, got = encoder(pixel_values=pixels), loaded(pixel_values=pixels)
    torch.testing.assert_close(got.embeddings, expected.embeddings)
    torch.testing.assert_close(got.projections, expected.projections)
    assert loaded.data_config == encoder.data_config


def test_pushed_vision_backbone_loads_with_timm_hf_hub(pushed_vision: tuple) -> None:
    encoder, _, repo_id = pushed_vision
    model = timm.create_model(f"hf-hub:{repo_id}", pretrained=True).eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(pixels), encoder(pixel_values=pixels).embeddings)


def test_pushed_card_has_valid_metadata(module_hub: HubServer, pushed_vision: tuple) -> None:
    _, _, repo_id = pushed_vision
    info = HfApi().model_info(repo_id)  # the stand-in parses the README's YAML like the Hub
    assert info.card_data.library_name == "timm" and "hf_contrast" in info.card_data.tags
    assert info.card_data.license == "mit" and info.card_data.pipeline_tag == "image-feature-extraction"
    assert info.card_data.datasets == ["user/digits"]
    assert [r.metric_value for r in info.card_data.eval_results] == [-1.5]
    text = ModelCard.load(repo_id).text
    assert f'timm.create_model("hf-hub:{repo_id}", pretrained=True).eval()' in text
    assert f'ContrastiveEncoder.from_pretrained("{repo_id}")' in text
    assert ("POST", "/api/validate-yaml") in module_hub.requests


def test_pushed_text_encoder_loads_with_hf_contrast_transformers_and_sentence_transformers(pushed_text: tuple) -> None:
    encoder, repo_id = pushed_text
    sentences = ["the cat sat on the mat", "hello world"]
    batch = encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        loaded = ContrastiveEncoder.from_pretrained(repo_id).eval()
        got = loaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        torch.testing.assert_close(got.projections, expected.projections)

        tokenizer = AutoTokenizer.from_pretrained(repo_id)
        native = tokenizer(sentences, padding=True, return_tensors="pt")
        hidden = AutoModel.from_pretrained(repo_id).eval()(**native).last_hidden_state
        mask = native["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        torch.testing.assert_close((hidden * mask).sum(1) / mask.sum(1), expected.embeddings)

    st_embeddings = SentenceTransformer(repo_id, device="cpu").encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(st_embeddings, expected.embeddings, atol=1e-5, rtol=1e-5)
    card = ModelCard.load(repo_id)
    assert card.data.library_name == "sentence-transformers" and card.data.language == "en"


def test_repush_refreshes_the_card_and_pull_requests_leave_main(module_hub: HubServer, pushed_vision: tuple) -> None:
    encoder, first, repo_id = pushed_vision
    encoder.model_card_data.license = "apache-2.0"
    pr = push_encoder_to_hub(encoder, repo_id, create_pr=True)
    assert pr.pr_url == f"{module_hub.url}/{repo_id}/discussions/1"
    assert ModelCard.load(repo_id).data.license == "mit"
    path = hf_hub_download(repo_id, "README.md", revision="refs/pr/1")
    assert ModelCard.load(path).data.license == "apache-2.0"


def test_a_hand_written_readme_on_the_hub_is_kept_unless_replaced(module_hub: HubServer) -> None:
    api = HfApi()
    api.create_repo("user/own-card")
    api.upload_file(
        path_or_fileobj=README.encode(), path_in_repo="README.md", repo_id="user/own-card"
    )  # has the tag, not our card
    encoder = tiny_timm_encoder()
    push_encoder_to_hub(encoder, "user/own-card")
    assert Path(hf_hub_download("user/own-card", "README.md")).read_text() == README
    assert "hf_contrast/model.safetensors" in api.list_repo_files("user/own-card")  # the model went up all the same
    push_encoder_to_hub(encoder, "user/own-card", replace_model_card=True)
    assert GENERATED_MARKER in Path(hf_hub_download("user/own-card", "README.md")).read_text()


def test_push_rejects_bad_arguments(module_hub: HubServer, pushed_vision: tuple) -> None:
    encoder = pushed_vision[0]
    with pytest.raises(ValueError, match="`repo_id` must be a Hub repository id"):
        push_encoder_to_hub(encoder, "")
    with pytest.raises(ValueError, match="`create_pr=True` opens a pull request against `main`"):
        push_encoder_to_hub(encoder, "user/x", revision="dev", create_pr=True)


# ----------------------------------------------------------------------------------------------
# The trainer's pushes: checkpoints and the final push upload save_pretrained's layout, no secret
# ----------------------------------------------------------------------------------------------


class _PushTrainer(CheckpointingMixin, HubPublishingMixin, Trainer):
    """The Hub side of the contrastive trainers on a minimal Trainer (the loss is not the point here)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.add_callback(ModelCardCallback(self))

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):  # noqa: ANN001, ANN201
        projections = model(pixel_values=inputs["pixel_values"]).projections
        return (projections @ projections.T).pow(2).mean()


def test_trainer_pushes_carry_no_token_and_the_final_push_is_the_one_layout(hub: HubServer, tmp_path: Path) -> None:
    import datasets

    secret = "hf_secretTOKEN0123456789"
    torch.manual_seed(0)
    encoder = tiny_timm_encoder()
    pixels = torch.randn(8, 3, 32, 32).tolist()
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=1,
        push_to_hub=True,
        hub_model_id="user/secret-run",
        hub_strategy="checkpoint",
        hub_token=secret,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        remove_unused_columns=False,
        logging_steps=1,
    )
    trainer = _PushTrainer(
        model=encoder, args=args, train_dataset=datasets.Dataset.from_dict({"pixel_values": pixels})
    )
    trainer.train()
    trainer.push_to_hub(license="mit", tags=["digits"])
    api = HfApi()
    files = api.list_repo_files("user/secret-run")
    assert {
        "README.md",
        "config.json",
        "model.safetensors",
        "hf_contrast/model.safetensors",
        "last-checkpoint/trainer_state.json",
    } <= set(files)
    for name in files:  # every file of the pushed repository, and everything left on disk
        assert secret.encode() not in Path(hf_hub_download("user/secret-run", name)).read_bytes(), name
    for path in (tmp_path / "run").rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    card = ModelCard.load("user/secret-run")
    assert card.data.library_name == "timm" and card.data.license == "mit" and "digits" in card.data.tags
    assert 'timm.create_model("hf-hub:user/secret-run", pretrained=True)' in card.text
    assert "| `max_steps` | 2 |" in card.text and "## Training logs" in card.text
    model = timm.create_model("hf-hub:user/secret-run", pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), encoder.eval()(pixel_values=x).embeddings)
    assert trainer.args.hub_token == secret  # stripped from what was written, not from the run


def test_trainer_push_keeps_a_hand_written_readme(hub: HubServer, tmp_path: Path) -> None:
    import datasets

    api = HfApi()
    api.create_repo("user/kept")
    api.upload_file(path_or_fileobj=b"# Notes by hand\n", path_in_repo="README.md", repo_id="user/kept")
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=1,
        per_device_train_batch_size=4,
        save_strategy="no",
        hub_model_id="user/kept",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        remove_unused_columns=False,
    )
    trainer = _PushTrainer(
        model=tiny_timm_encoder(),
        args=args,
        train_dataset=datasets.Dataset.from_dict({"pixel_values": torch.randn(4, 3, 32, 32).tolist()}),
    )
    trainer.train()
    trainer.push_to_hub()
    assert Path(hf_hub_download("user/kept", "README.md")).read_bytes() == b"# Notes by hand\n"
    assert "hf_contrast/model.safetensors" in api.list_repo_files("user/kept")
    trainer.push_to_hub(replace_model_card=True)
    assert GENERATED_MARKER in Path(hf_hub_download("user/kept", "README.md")).read_text()


def test_create_model_card_takes_every_trainer_argument(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """transformers' run_clip.py passes `tasks=`; what an hf_contrast card cannot hold is named in a warning."""
    import inspect
    import logging

    import datasets

    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, save_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, remove_unused_columns=False,
    )  # fmt: skip
    data = datasets.Dataset.from_dict({"pixel_values": torch.randn(4, 3, 32, 32).tolist()})
    trainer = _PushTrainer(model=tiny_timm_encoder(), args=args, train_dataset=data)
    trainer.train()
    trainer_parameters = set(inspect.signature(Trainer.create_model_card).parameters) - {"self"}
    assert trainer_parameters <= set(inspect.signature(trainer.create_model_card).parameters)
    with caplog.at_level(logging.WARNING, logger="hf_contrast.training.publishing"):
        trainer.create_model_card(
            language="en", license="mit", tags=["digits"], model_name="tiny", finetuned_from=None,
            tasks="contrastive-image-text-modeling", dataset_tags="user/imgs", dataset="imgs", dataset_args="default",
        )  # fmt: skip
    assert "`dataset_args`, `tasks` not used" in caplog.text
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.license == "mit" and "digits" in card.data.tags and card.data.datasets == ["user/imgs"]
    assert GENERATED_MARKER in card.text


def test_push_to_hub_with_the_hub_unreachable_is_said_before_training(tmp_path: Path) -> None:
    """``--push_to_hub`` offline: transformers' Trainer creates the repository when it is built, and the connection
    error came out as an httpx traceback; now one message naming the flag and what to do instead."""
    import socket

    from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder

    from hf_contrast.errors import InputError
    from hf_contrast.training import SimCLRTrainer

    with socket.socket() as probe:  # a loopback port nothing listens on: every request is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = training_args(tmp_path / "out", push_to_hub=True, hub_model_id="me/model", max_steps=1)
    with use_hub_server(f"http://127.0.0.1:{port}", cache_dir=tmp_path / "cache", timeout=5.0):
        with pytest.raises(InputError, match=r"`push_to_hub=True` \(`--push_to_hub`\): the Hugging Face Hub is unr"):
            SimCLRTrainer(model=vit_encoder(), args=args, train_dataset=image_dataset(n=8, size=16))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing written
