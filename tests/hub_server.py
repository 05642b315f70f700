"""A loopback stand-in for the Hugging Face Hub HTTP API, for tests that push and load models.

It speaks the part of the Hub API that ``huggingface_hub`` (and through it ``transformers``,
``timm`` and ``sentence-transformers``) uses to create a repository, commit files and resolve /
download them:

==========================================================  ==============================================
``POST /api/repos/create``, ``DELETE /api/repos/delete``    ``HfApi.create_repo`` / ``delete_repo``
``POST /api/validate-yaml``                                 README metadata check before a commit
``POST /api/{type}s/{repo}/preupload/{rev}``                answers ``"regular"`` for every file, so the
                                                            client sends contents inline (base64) in
                                                            the commit: no LFS, no Xet
``POST /api/{type}s/{repo}/commit/{rev}``                   NDJSON commit (``file``, ``deletedFile``,
                                                            ``deletedFolder``; ``create_pr=1``)
``GET /api/{type}s/{repo}[/revision/{rev}]``                ``model_info`` / ``repo_info`` (siblings, sha,
                                                            cardData)
``GET /api/{type}s/{repo}/tree/{rev}[/{path}]``             ``list_repo_tree`` / ``list_repo_files``
``GET /api/{type}s/{repo}/refs``                            ``list_repo_refs``
``POST /api/{type}s/{repo}/branch/{name}``                  ``create_branch``
``GET /api/whoami-v2``                                      ``whoami`` (always the user ``namespace``)
``HEAD``/``GET /[{type}s/]{repo}/resolve/{rev}/{path}``     ``hf_hub_download``: ``X-Repo-Commit``,
                                                            ``ETag`` (git blob sha1), ``Content-Length``,
                                                            byte ranges
==========================================================  ==============================================

Errors carry the Hub's ``X-Error-Code`` header (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``) so the client raises its usual typed exceptions. Authentication is not checked.
The server binds ``127.0.0.1`` on a free port, serves from a daemon thread and stores blobs under
``storage_dir`` (the repository state is also written there as ``state.json``).

:func:`use_hub_server` points the current process at a running stand-in: it sets ``HF_ENDPOINT``
and friends, patches the values ``huggingface_hub`` read into ``huggingface_hub.constants`` at
import time (endpoint, offline mode, Xet, cache), re-points the ``HfApi`` instances created at
import (``huggingface_hub.hf_api.api``, ``transformers``' cached one) and installs an HTTP client
with a timeout that refuses any host but loopback and records what it refused.

>>> from hub_server import run_hub_server, use_hub_server
>>> with run_hub_server(tmp_path / "hub") as url, use_hub_server(url, cache_dir=tmp_path / "cache") as refused:
...     HfApi().create_repo("user/tiny")  # doctest: +SKIP
...     assert refused == []  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

__all__ = ["HubServer", "run_hub_server", "use_hub_server"]

_REPO_TYPES = ("model", "dataset", "space")
_URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_INITIAL_GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _git_blob_oid(data: bytes) -> str:
    """Git's object id of a blob (what the Hub returns as the ETag of a regular file)."""
    return hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class HubError(Exception):
    """An HTTP error answered to the client, with the Hub's ``X-Error-Code`` header."""

    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.commit = commit


class _HubState:
    """Repositories, commits and blobs of the stand-in (thread-safe, persisted in ``storage_dir``)."""

    def __init__(self, storage_dir: Path, namespace: str) -> None:
        self.storage_dir = storage_dir
        self.namespace = namespace
        self.blob_dir = storage_dir / "blobs"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = storage_dir / "state.json"
        self.lock = threading.RLock()
        if self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            self.repos: dict[str, dict[str, Any]] = state["repos"]
            self.commits: dict[str, dict[str, Any]] = state["commits"]
        else:
            self.repos, self.commits = {}, {}

    def _save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"repos": self.repos, "commits": self.commits}))
        tmp.replace(self.state_file)

    # -- blobs -----------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        oid = _git_blob_oid(data)
        path = self.blob_dir / oid
        if not path.exists():
            path.write_bytes(data)
        return oid

    def blob_path(self, oid: str) -> Path:
        return self.blob_dir / oid

    # -- repositories ----------------------------------------------------------------------------
    @staticmethod
    def key(repo_type: str, repo_id: str) -> str:
        return f"{repo_type}s/{repo_id}"

    def repo(self, repo_type: str, repo_id: str) -> dict[str, Any]:
        repo = self.repos.get(self.key(repo_type, repo_id))
        if repo is None:
            raise HubError(404, f"Repository {repo_type}s/{repo_id} not found", "RepoNotFound")
        return repo

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> None:
        with self.lock:
            key = self.key(repo_type, repo_id)
            if key in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo: {repo_id}")
            self.repos[key] = {"id": repo_id, "type": repo_type, "private": private, "created": _now(), "refs": {}}
            self._commit(
                self.repos[key],
                "main",
                {".gitattributes": self.put_blob(_INITIAL_GITATTRIBUTES)},
                "initial commit",
                "",
            )
            self._save()

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        with self.lock:
            self.repo(repo_type, repo_id)
            del self.repos[self.key(repo_type, repo_id)]
            self._save()

    def create_branch(self, repo_type: str, repo_id: str, branch: str, starting_point: str | None) -> None:
        with self.lock:
            repo = self.repo(repo_type, repo_id)
            if branch in repo["refs"]:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            repo["refs"][branch] = self.resolve(repo, starting_point or "main")
            self._save()

    def resolve(self, repo: dict[str, Any], revision: str) -> str:
        """Commit sha of a branch, PR ref or commit sha."""
        if revision in repo["refs"]:
            return repo["refs"][revision]
        if revision in self.commits and self.commits[revision]["repo"] == self.key(repo["type"], repo["id"]):
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def tree(self, repo: dict[str, Any], revision: str) -> tuple[str, dict[str, str]]:
        sha = self.resolve(repo, revision)
        return sha, self.commits[sha]["tree"]

    def _commit(self, repo: dict[str, Any], ref: str, tree: dict[str, str], title: str, description: str) -> str:
        parent = repo["refs"].get(ref)
        record = {
            "repo": self.key(repo["type"], repo["id"]),
            "parent": parent,
            "tree": tree,
            "title": title,
            "description": description,
            "date": _now(),
        }
        sha = hashlib.sha1(json.dumps([record, len(self.commits)], sort_keys=True).encode()).hexdigest()
        self.commits[sha] = record
        repo["refs"][ref] = sha
        return sha

    def commit(
        self,
        repo_type: str,
        repo_id: str,
        revision: str,
        lines: list[dict[str, Any]],
        create_pr: bool,
    ) -> tuple[str, int | None]:
        """Apply an NDJSON commit payload; returns the new commit sha and the PR number if any."""
        with self.lock:
            repo = self.repo(repo_type, repo_id)
            if revision not in repo["refs"]:
                if create_pr or revision in self.commits:
                    raise HubError(400, f"Cannot commit on revision {revision!r}: it is not a branch")
                raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            base = repo["refs"][revision]
            header = next((line["value"] for line in lines if line.get("key") == "header"), {})
            parent_commit = header.get("parentCommit")
            if parent_commit is not None and parent_commit != base:
                raise HubError(412, f"Parent commit {parent_commit} is not the head of {revision} ({base})")
            tree = dict(self.commits[base]["tree"])
            for line in lines:
                key, value = line.get("key"), line.get("value", {})
                if key == "header":
                    continue
                if key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HubError(400, f"Unsupported encoding {value.get('encoding')!r}")
                    tree[value["path"]] = self.put_blob(base64.b64decode(value["content"]))
                elif key == "deletedFile":
                    if value["path"] not in tree:
                        raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                    del tree[value["path"]]
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    tree = {path: oid for path, oid in tree.items() if not path.startswith(prefix)}
                else:
                    raise HubError(
                        400,
                        f"The loopback Hub stand-in does not support commit operation {key!r} "
                        "(it asks for every file inline, so LFS/Xet uploads and copies are not implemented)",
                    )
            pr_number = None
            ref = revision
            if create_pr:
                pr_number = 1 + sum(name.startswith("refs/pr/") for name in repo["refs"])
                ref = f"refs/pr/{pr_number}"
                repo["refs"][ref] = base
            sha = self._commit(repo, ref, tree, header.get("summary", ""), header.get("description", ""))
            self._save()
            return sha, pr_number


class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes Hub API requests to :class:`_HubState`."""

    server: _HubHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds of socket inactivity before a connection is dropped

    # -- plumbing --------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean; requests are recorded in `HubServer.requests`

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))  # also for HEAD: the size of what GET sends
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer has the headers of the GET one, and no body
            self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers=headers)

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        segments = [unquote(s) for s in parts.path.strip("/").split("/")]
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.server.requests.append((method, parts.path))
        try:
            body = self._body() if method in ("POST", "PUT", "DELETE") else b""
            self._route(method, segments, query, body)
        except HubError as error:
            headers = {"X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            if error.commit:
                headers["X-Repo-Commit"] = error.commit
            self._json(error.status, {"error": error.message}, headers=headers)
        except Exception as error:  # a bug in the stand-in: answer 500 rather than hang the client
            self._json(500, {"error": f"{type(error).__name__}: {error}"})

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # -- routing ---------------------------------------------------------------------------------
    def _route(self, method: str, seg: list[str], query: dict[str, str], body: bytes) -> None:
        state = self.server.state
        if seg[0] == "api":
            if seg[1:] == ["repos", "create"] and method == "POST":
                return self._create_repo(json.loads(body or b"{}"))
            if seg[1:] == ["repos", "delete"] and method == "DELETE":
                payload = json.loads(body or b"{}")
                state.delete_repo(payload.get("type") or "model", self._repo_id(payload))
                return self._json(200, {})
            if seg[1:] == ["validate-yaml"] and method == "POST":
                return self._validate_yaml(json.loads(body or b"{}"))
            if seg[1:] == ["whoami-v2"]:
                auth = {"type": "access_token", "accessToken": {"role": "write"}}
                return self._json(
                    200,
                    {"type": "user", "name": state.namespace, "fullname": state.namespace, "orgs": [], "auth": auth},
                )
            if len(seg) >= 4 and seg[1].rstrip("s") in _REPO_TYPES:
                repo_type, repo_id, rest = seg[1][:-1], f"{seg[2]}/{seg[3]}", seg[4:]
                return self._repo_api(method, repo_type, repo_id, rest, query, body)
            raise HubError(404, f"Unknown API route /{'/'.join(seg)} (not served by the loopback stand-in)")
        # /{repo}/resolve/{rev}/{path} and /datasets|spaces/{repo}/resolve/...
        repo_type = "model"
        if seg[0] in ("datasets", "spaces"):
            repo_type, seg = seg[0][:-1], seg[1:]
        if len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve(method, repo_type, f"{seg[0]}/{seg[1]}", seg[3], "/".join(seg[4:]))
        raise HubError(404, f"Unknown route /{'/'.join(seg)} (not served by the loopback stand-in)")

    def _repo_id(self, payload: dict[str, Any]) -> str:
        return f"{payload.get('organization') or self.server.state.namespace}/{payload['name']}"

    def _create_repo(self, payload: dict[str, Any]) -> None:
        repo_type = payload.get("type") or "model"
        repo_id = self._repo_id(payload)
        private = payload.get("visibility", "public") != "public" or bool(payload.get("private"))
        payload = {"url": f"{self.server.url}/{_URL_PREFIXES[repo_type]}{repo_id}", "name": repo_id, "id": repo_id}
        try:
            self.server.state.create_repo(repo_type, repo_id, private)
        except HubError as error:  # the Hub answers 409 with the url, which `exist_ok=True` returns
            return self._json(
                error.status, {"error": error.message, **payload}, headers={"X-Error-Message": error.message}
            )
        self._json(200, payload)

    def _validate_yaml(self, payload: dict[str, Any]) -> None:
        content: str = payload.get("content", "")
        if not content.startswith("---"):
            return self._json(
                200, {"errors": [], "warnings": [{"message": "empty or missing yaml metadata in repo card"}]}
            )
        try:
            block = content.split("---", 2)[1]
            metadata = yaml.safe_load(block)
            if metadata is not None and not isinstance(metadata, dict):
                raise yaml.YAMLError(f"metadata must be a mapping, got {type(metadata).__name__}")
        except (IndexError, yaml.YAMLError) as error:
            return self._json(400, {"errors": [{"message": f"Invalid YAML metadata: {error}"}], "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def _repo_api(
        self, method: str, repo_type: str, repo_id: str, rest: list[str], query: dict[str, str], body: bytes
    ) -> None:
        state = self.server.state
        with state.lock:
            repo = state.repo(repo_type, repo_id)
            if method == "POST" and len(rest) == 2 and rest[0] == "preupload":
                state.resolve(repo, rest[1])
                _, tree = state.tree(repo, rest[1])
                files = json.loads(body)["files"]
                modes = [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": tree.get(f["path"])}
                    for f in files
                ]
                return self._json(200, {"files": modes})
        if method == "POST" and len(rest) == 2 and rest[0] == "branch":
            state.create_branch(repo_type, repo_id, rest[1], json.loads(body or b"{}").get("startingPoint"))
            return self._json(200, {})
        if method == "POST" and len(rest) == 2 and rest[0] == "commit":
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            sha, pr = state.commit(repo_type, repo_id, rest[1], lines, create_pr=query.get("create_pr") == "1")
            prefix = f"{self.server.url}/{_URL_PREFIXES[repo_type]}{repo_id}"
            pr_url = f"{prefix}/discussions/{pr}" if pr is not None else None
            return self._json(
                200,
                {"success": True, "commitOid": sha, "commitUrl": f"{prefix}/commit/{sha}", "pullRequestUrl": pr_url},
            )
        if method != "GET":
            raise HubError(405, f"{method} not supported on /api/{repo_type}s/{repo_id}/{'/'.join(rest)}")
        with state.lock:
            if not rest or (len(rest) == 2 and rest[0] == "revision"):
                return self._json(200, self._info(repo, rest[1] if rest else "main"))
            if rest[0] == "tree" and len(rest) >= 2:
                sha, tree = state.tree(repo, rest[1])
                return self._tree(tree, "/".join(rest[2:]), query.get("recursive", "false").lower() == "true", sha)
            if rest == ["refs"]:
                refs = repo["refs"].items()
                branches = [
                    {"name": n, "ref": f"refs/heads/{n}", "targetCommit": s}
                    for n, s in refs
                    if not n.startswith("refs/")
                ]
                prs = [{"name": n, "ref": n, "targetCommit": s} for n, s in refs if n.startswith("refs/pr/")]
                return self._json(200, {"branches": branches, "tags": [], "converts": [], "pullRequests": prs})
        raise HubError(404, f"Unknown API route /api/{repo_type}s/{repo_id}/{'/'.join(rest)}")

    def _info(self, repo: dict[str, Any], revision: str) -> dict[str, Any]:
        state = self.server.state
        sha, tree = state.tree(repo, revision)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(repo["id"].encode()).hexdigest()[:24],
            "id": repo["id"],
            "author": repo["id"].split("/")[0],
            "sha": sha,
            "private": repo["private"],
            "gated": False,
            "disabled": False,
            "createdAt": repo["created"],
            "lastModified": state.commits[sha]["date"],
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [
                {"rfilename": path, "size": state.blob_path(oid).stat().st_size, "blobId": oid}
                for path, oid in sorted(tree.items())
            ],
        }
        if repo["type"] == "model":
            info["modelId"] = repo["id"]
        if "README.md" in tree:
            text = state.blob_path(tree["README.md"]).read_text(encoding="utf-8", errors="replace")
            if text.startswith("---"):
                with contextlib.suppress(Exception):
                    card_data = yaml.safe_load(text.split("---", 2)[1])
                    if isinstance(card_data, dict):
                        info["cardData"] = card_data
                        info["tags"] = list(card_data.get("tags") or [])
                        for key in ("library_name", "pipeline_tag"):
                            if key in card_data:
                                info[key] = card_data[key]
        return info

    def _tree(self, tree: dict[str, str], path: str, recursive: bool, sha: str) -> None:
        state = self.server.state
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        if prefix and prefix[:-1] in tree:
            raise HubError(400, f"{path} is a file, not a directory")
        entries: dict[str, dict[str, Any]] = {}
        for file_path, oid in sorted(tree.items()):
            if not file_path.startswith(prefix):
                continue
            parts = file_path[len(prefix) :].split("/")
            # every directory on the way (recursive) or only the first level
            for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
                folder = prefix + "/".join(parts[:depth])
                entries.setdefault(
                    folder, {"type": "directory", "path": folder, "oid": hashlib.sha1(folder.encode()).hexdigest()}
                )
            if recursive or len(parts) == 1:
                entries[file_path] = {
                    "type": "file",
                    "path": file_path,
                    "oid": oid,
                    "size": state.blob_path(oid).stat().st_size,
                }
        if prefix and not entries:
            raise HubError(404, f"{path} does not exist on {sha}", "EntryNotFound", commit=sha)
        self._json(200, list(entries.values()))

    def _resolve(self, method: str, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        state = self.server.state
        with state.lock:
            repo = state.repo(repo_type, repo_id)
            sha, tree = state.tree(repo, revision)
            if path not in tree:
                raise HubError(404, f"Entry not found: {path}", "EntryNotFound", commit=sha)
            oid = tree[path]
        data = state.blob_path(oid).read_bytes()
        headers = {"X-Repo-Commit": sha, "ETag": f'"{oid}"', "Accept-Ranges": "bytes"}
        status, payload = 200, data
        range_header = self.headers.get("Range")
        if range_header and range_header.startswith("bytes=") and method == "GET":
            start_text, _, end_text = range_header[len("bytes=") :].partition("-")
            start = int(start_text or 0)
            end = int(end_text) if end_text else len(data) - 1
            status, payload = 206, data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{start + len(payload) - 1}/{len(data)}"
        self._send(status, payload, content_type="application/octet-stream", headers=headers)


class _HubHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _HubState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.requests: list[tuple[str, str]] = []


class HubServer:
    """The loopback Hub stand-in: start it, use :attr:`url` as ``HF_ENDPOINT``, stop it.

    Args:
        storage_dir: Where blobs and the repository state are kept (created if missing). A new
            server on the same directory sees the repositories of the previous one.
        namespace: The user name answered by ``whoami`` and used for repo ids without a namespace.

    Attributes:
        url: ``http://127.0.0.1:<port>`` once started.
        requests: ``(method, path)`` of every request received, in order.
    """

    def __init__(self, storage_dir: str | os.PathLike[str], namespace: str = "user") -> None:
        self.storage_dir = Path(storage_dir)
        self.storage_dir.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self._httpd: _HubHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("The Hub stand-in is not running; call `start()` first")
        return self._httpd.url

    @property
    def requests(self) -> list[tuple[str, str]]:
        return [] if self._httpd is None else self._httpd.requests

    def start(self) -> HubServer:
        self._httpd = _HubHTTPServer(_HubState(self.storage_dir, self.namespace))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="hub-stand-in"
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def run_hub_server(storage_dir: str | os.PathLike[str], namespace: str = "user") -> Iterator[str]:
    """Run the loopback Hub stand-in for the duration of a ``with`` block.

    Args:
        storage_dir: Where blobs and the repository state are kept.
        namespace: The user name of ``whoami`` and of repo ids given without a namespace.

    Returns:
        A context manager yielding the endpoint url (``http://127.0.0.1:<port>``).
    """
    with HubServer(storage_dir, namespace) as server:
        yield server.url


def _loopback_client_factory(timeout: float, refused: list[str]) -> Any:
    """An ``httpx`` client factory like ``huggingface_hub``'s, with a timeout and a loopback-only guard."""
    from huggingface_hub.utils import _http

    httpx = getattr(_http, "httpx2", None) or _http.httpx  # huggingface_hub >= 2 is built on httpx2, 1.x on httpx

    def refuse_remote(request: Any) -> None:
        if request.url.host not in _LOOPBACK_HOSTS:
            refused.append(str(request.url))
            raise httpx.ConnectError(f"the loopback Hub stand-in refuses a request to {request.url}", request=request)

    def factory() -> Any:
        return httpx.Client(
            event_hooks={"request": [refuse_remote, _http.hf_request_event_hook]},
            follow_redirects=True,
            timeout=timeout,
        )

    return factory


@contextlib.contextmanager
def use_hub_server(
    url: str,
    cache_dir: str | os.PathLike[str],
    token: str = "hf_loopback_stand_in_token",
    timeout: float = 30.0,
) -> Iterator[list[str]]:
    """Point ``huggingface_hub`` (and the libraries built on it) at the stand-in at ``url``.

    Sets ``HF_ENDPOINT``, ``HF_HUB_OFFLINE=0``, ``HF_HUB_DISABLE_XET=1``, ``HF_HUB_CACHE`` and a
    dummy ``HF_TOKEN`` (so no stored credential is read) in ``os.environ`` for subprocesses; patches
    the same values in ``huggingface_hub.constants`` (read once at import); re-points the
    module-level ``HfApi`` behind ``huggingface_hub.model_info`` & co and drops the one
    ``transformers`` caches; installs an HTTP client that has a ``timeout`` and refuses any
    non-loopback host. Everything is restored on exit.

    Args:
        url: The stand-in's endpoint, e.g. from :func:`run_hub_server`.
        cache_dir: A fresh download cache (``HF_HUB_CACHE``).
        token: The token sent with requests (the stand-in does not check it).
        timeout: Seconds before any Hub request gives up.

    Returns:
        A context manager yielding the list of urls it refused (libraries may swallow the error
        and fall back to their cache, so a test asserts this list is empty).

    Raises:
        ValueError: If ``url`` is not a loopback ``http://`` url.
    """
    host = urlsplit(url).hostname
    if not url.startswith("http://") or host not in _LOOPBACK_HOSTS:
        raise ValueError(f"`url` must be a loopback http:// url of the stand-in, got {url!r}")
    from huggingface_hub import constants, hf_api
    from huggingface_hub.utils import _http

    url = url.rstrip("/")
    cache_dir = str(cache_dir)
    harness_path = os.path.join(cache_dir, ".agent_harnesses.json")
    env = {
        "HF_ENDPOINT": url,
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_CACHE": cache_dir,
        "HF_TOKEN": token,
    }
    patched = {
        "ENDPOINT": url,
        "HUGGINGFACE_CO_URL_TEMPLATE": url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_CACHE": cache_dir,
        "AGENT_HARNESSES_PATH": harness_path,
    }
    saved_env = {name: os.environ.get(name) for name in env}
    # a constant the installed huggingface_hub does not define yet (AGENT_HARNESSES_PATH is newer than
    # the supported floor) is not used by it either: patch only those it has
    patched = {name: value for name, value in patched.items() if hasattr(constants, name)}
    saved_constants = {name: getattr(constants, name) for name in patched}
    saved_factory = _http._GLOBAL_CLIENT_FACTORY
    module_api = hf_api.api  # the `HfApi()` behind `huggingface_hub.model_info` & co, made at import
    saved_api_endpoint = module_api.endpoint
    transformers_hub = _transformers_hub_module()
    saved_hf_api = getattr(transformers_hub, "_hf_api", None) if transformers_hub is not None else None
    try:
        os.environ.update(env)
        for name, value in patched.items():
            setattr(constants, name, value)
        module_api.endpoint = url
        if transformers_hub is not None:
            transformers_hub._hf_api = None
        refused: list[str] = []
        _http.set_client_factory(_loopback_client_factory(timeout, refused))
        yield refused
    finally:
        _http.set_client_factory(saved_factory)
        module_api.endpoint = saved_api_endpoint
        for name, value in saved_constants.items():
            setattr(constants, name, value)
        if transformers_hub is not None:
            transformers_hub._hf_api = saved_hf_api
        for name, previous in saved_env.items():
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous


def _transformers_hub_module() -> Any:
    """``transformers.utils.hub`` if transformers is installed (it caches an ``HfApi``), else ``None``."""
    try:
        import transformers.utils.hub as transformers_hub
    except ImportError:
        return None
    return transformers_hub
