"""The Hub client: the ranked listing, config-only snapshots, and what each failure means.

Everything this tool asks of the Hugging Face Hub goes through `HubClient`:

- `list_models(top)`: the most downloaded models, with tags, config summary and gated flag.
- `fetch_configs(model_id, library=...)`: a snapshot of the repo's config files only
  (`snapshot_download(allow_patterns=...)`): `config.json`, and for a diffusers pipeline its
  `model_index.json` with each component's `config.json` / `scheduler_config.json`. Never weights,
  never code: the patterns name JSON files only, and only files that pass `is_config_file` are
  ever read or copied.
- `save_configs(model_id, folder, library=...)`: the same, copied into a catalog's config folder
  with a record of what happened (`.hfsweep-fetch.json`), which resolution reads back
  (`cached_configs`).

Failures fall in three kinds:

- transient (a timeout, a dropped connection, 408/429/5xx, a malformed JSON answer): retried with
  exponential backoff, honouring `Retry-After`; still failing after the last try, `HubError` stops
  the command: an environment problem is never a model's result;
- the model's own (gated, not found or deleted since the listing, no config file): a
  `ConfigFetch` with that SkipReason, so the model gets rows with the reason;
- anything else (offline mode, an endpoint that is not a Hub): `HubError` at once.

huggingface_hub retries some requests itself (listing pages, file downloads); its requests that
carry no timeout get one (`HFSWEEP_HUB_TIMEOUT`) through the HTTP client it is given here.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ground import settings
from ground.errors import ConfigError, HubError
from ground.ids import is_hub_repo_id, unsafe_model_id
from ground.schema import SkipReason

T = TypeVar("T")

RECORD_NAME = ".hfsweep-fetch.json"
FETCHED = "fetched"
GATED = SkipReason.GATED.value
NOT_FOUND = SkipReason.NOT_FOUND.value
NO_CONFIG = SkipReason.NO_CONFIG.value

# The only files ever fetched: configs, at the repo root or one component folder down.
CONFIG_FILENAMES = frozenset({"config.json", "model_index.json", "scheduler_config.json",
                              "modules.json", "sentence_bert_config.json",
                              "open_clip_config.json", "config.yaml"})  # fmt: skip
# Never asked for, whatever a repo's tree lists: paths that climb (`..`) or are absolute
# (huggingface_hub refuses those with an error that would stop the whole refresh), and anything
# two folders down. (huggingface_hub reads a backslash in a pattern as a path separator.)
IGNORE_PATTERNS = ("*..*", "/*", "*/*/*")
LIST_EXPAND = [
    "downloads",
    "likes",
    "pipeline_tag",
    "library_name",
    "tags",
    "config",
    "gated",
    "siblings",
]
RETRY_STATUS = frozenset({408, 425, 429})  # and every 5xx


def config_patterns(library: str | None) -> tuple[str, ...]:
    """`allow_patterns` for a library's configs: its adapter's `hub_files` (`config.json` for a
    library no adapter takes)."""
    from model_configs.libraries import ADAPTERS, get_adapter
    from model_configs.libraries.base import Adapter

    return get_adapter(library).hub_files if library in ADAPTERS else Adapter.hub_files


def is_config_file(path: str) -> bool:
    """True only for a config JSON (`CONFIG_FILENAMES`) at the repo root or one folder down,
    as a plain relative path: never a weight, never code, never a path that climbs out."""
    if not path or "\\" in path or path.startswith("/") or "\x00" in path:
        return False
    parts = path.split("/")
    if not 1 <= len(parts) <= 2 or any(p in ("", ".", "..") for p in parts):
        return False
    return parts[-1] in CONFIG_FILENAMES


# ---- retries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How transient Hub failures are retried: `attempts` tries in all, waiting `base_s`,
    2x`base_s`, 4x`base_s`... (at most `max_s`), or what the server's `Retry-After` asks."""

    attempts: int = 4
    base_s: float = 2.0
    max_s: float = 60.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(self.max_s, max(0.0, retry_after))
        return float(min(self.max_s, self.base_s * 2 ** (attempt - 1)))


class MalformedAnswer(ValueError):
    """The Hub answered, but not with what its API promises (a transient failure)."""


@dataclass(frozen=True)
class Failure:
    """What a Hub exception means here. `kind`: transient, gated, not_found, no_config, fatal."""

    kind: str
    message: str
    retry_after: float | None = None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Timeouts and dropped connections of whichever httpx huggingface_hub uses."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        found += [mod.TimeoutException, mod.NetworkError, mod.RemoteProtocolError]
    return tuple(found)


def _retry_after(response: Any) -> float | None:
    value = (getattr(response, "headers", None) or {}).get("Retry-After")
    if not value:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def classify(exc: BaseException) -> Failure:
    """What `exc` (raised by huggingface_hub, or under it) means for a model and for the run."""
    from huggingface_hub import errors as e

    entry_missing = getattr(e, "RemoteEntryNotFoundError", e.EntryNotFoundError)
    for err in _chain(exc):
        if isinstance(err, e.OfflineModeIsEnabled):
            return Failure("fatal", "the Hub is offline (HF_HUB_OFFLINE=1)")
        if isinstance(err, e.GatedRepoError):
            return Failure(
                "gated", "the repo is gated: accept its licence on the Hub and set HF_TOKEN"
            )
        if isinstance(
            err,
            e.RepositoryNotFoundError
            | e.RevisionNotFoundError
            | e.DisabledRepoError
            | e.HFValidationError,
        ):
            return Failure("not_found", "the repo does not exist on the Hub (deleted, or private)")
        if isinstance(err, entry_missing):
            return Failure("no_config", "the repo has no such config file")
        if isinstance(err, e.HfHubHTTPError) and err.response is not None:
            status = err.response.status_code
            if status in RETRY_STATUS or status >= 500:
                return Failure("transient", f"HTTP {status}", _retry_after(err.response))
            return Failure("fatal", f"HTTP {status}: {err}")
        if isinstance(err, json.JSONDecodeError | MalformedAnswer):
            return Failure("transient", f"malformed answer: {err}")
        if isinstance(err, _transport_errors()):
            return Failure("transient", f"{type(err).__name__}: {err or 'no answer in time'}")
    return Failure("fatal", f"{type(exc).__name__}: {exc}")


# ---- request timeouts ---------------------------------------------------------------------


def install_request_timeout(seconds: float) -> None:
    """Give every huggingface_hub request that carries no timeout one of `seconds`.

    Its listing and repo-info calls pass `timeout=None` (wait forever) to a client built with no
    timeout either; a hook on the client it is given fills in the missing values.
    """
    import huggingface_hub

    try:
        from huggingface_hub.utils._http import default_client_factory
    except ImportError:  # pragma: no cover - another huggingface_hub layout: its defaults apply
        return

    def fill(request: Any) -> None:
        given = dict(request.extensions.get("timeout") or {})
        for key in ("connect", "read", "write", "pool"):
            if given.get(key) is None:
                given[key] = seconds
        request.extensions["timeout"] = given

    def factory() -> Any:
        client = default_client_factory()
        hooks = dict(client.event_hooks)
        hooks["request"] = [*hooks.get("request", []), fill]
        client.event_hooks = hooks
        return client

    huggingface_hub.set_client_factory(factory)


# ---- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigFetch:
    """What fetching one model's configs gave: `status` is `fetched`, or the SkipReason
    (`gated`, `not_found`, `no_config`) its rows will carry."""

    model_id: str
    status: str
    message: str = ""
    files: tuple[str, ...] = ()  # relative paths, each passing is_config_file
    revision: str | None = None  # the commit the files were read at
    folder: Path | None = None  # where the files are (not recorded)

    def raise_for_skip(self) -> None:
        """ConfigError (gated / not_found) when the model cannot be resolved from the Hub."""
        if self.status in (GATED, NOT_FOUND):
            raise ConfigError(self.message, reason=self.status, model_id=self.model_id)

    def record(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "status": self.status,
            "message": self.message,
            "files": list(self.files),
            "revision": self.revision,
            "fetched_at": dt.datetime.now(dt.UTC).isoformat(),
        }


def model_folder(root: Path, model_id: str) -> Path | None:
    """`root/<org>/<name>`, or None when the id could climb out of `root`."""
    if unsafe_model_id(model_id):
        return None
    return root.joinpath(*model_id.split("/"))


def read_record(folder: Path) -> ConfigFetch | None:
    """The record `save_configs` left in a model's folder (None: none, or unreadable)."""
    try:
        data = json.loads((folder / RECORD_NAME).read_text(encoding="utf-8"))
        return ConfigFetch(
            model_id=str(data["model_id"]),
            status=str(data["status"]),
            message=str(data.get("message") or ""),
            files=tuple(f for f in data.get("files") or () if is_config_file(str(f))),
            revision=data.get("revision"),
            folder=folder,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cached_configs(config_dir: Path, model_id: str) -> Path | None:
    """The folder of a model's cached configs in a catalog's config folder (None when the id is
    unsafe or nothing was cached); ConfigError when the refresh recorded it gated or gone."""
    folder = model_folder(config_dir, model_id)
    if folder is None or not folder.is_dir():
        return None
    record = read_record(folder)
    if record is not None:
        record.raise_for_skip()
    return folder


# ---- the client ---------------------------------------------------------------------------


class HubClient:
    """The Hub, asked only for listings and config files, with timeouts and retries.

    `endpoint` defaults to huggingface_hub's (`HF_ENDPOINT`), `token` to `HF_TOKEN`,
    `cache_dir` (huggingface_hub's cache layout) to `<hfsweep cache>/hub`.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        cache_dir: Path | None = None,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ):
        from huggingface_hub import HfApi
        from huggingface_hub.utils import disable_progress_bars

        self.token = token or settings.hub_token()
        self.endpoint = endpoint
        self.cache_dir = Path(cache_dir) if cache_dir else settings.cache_dir() / "hub"
        self.timeout_s = timeout_s if timeout_s is not None else settings.hub_timeout_s()
        self.retry = retry or RetryPolicy(attempts=settings.hub_retries() + 1)
        install_request_timeout(self.timeout_s)
        disable_progress_bars()  # one bar per model's snapshot would drown the command's own
        self.api: Any = HfApi(endpoint=endpoint, token=self.token)

    def call(self, what: str, fn: Callable[[], T], *, model_failures: bool = False) -> T:
        """`fn()`, retried on transient failures. A model's own failure (gated, not found, no
        config) is raised as is when `model_failures`, else it is a HubError like the rest."""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return fn()
            except Exception as exc:
                failure = classify(exc)
                if failure.kind in (GATED, NOT_FOUND, NO_CONFIG) and model_failures:
                    raise
                if failure.kind != "transient":
                    raise HubError(f"cannot {what}: {failure.message}", hint=_hint()) from exc
                if attempt == self.retry.attempts:
                    raise HubError(
                        f"the Hub kept failing to {what} ({failure.message}; "
                        f"{self.retry.attempts} tries)",
                        hint=_hint(),
                    ) from exc
                self.retry.sleep(self.retry.delay(attempt, failure.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def list_models(self, top: int) -> list[Any]:
        """The `top` most downloaded models (huggingface_hub ModelInfo objects)."""

        def listing() -> list[Any]:
            try:
                infos = list(self.api.list_models(sort="downloads", limit=top, expand=LIST_EXPAND))
            except (KeyError, TypeError, AttributeError) as exc:
                raise MalformedAnswer(f"the model listing is malformed ({exc!r})") from exc
            if any(not isinstance(getattr(i, "id", None), str) for i in infos):
                raise MalformedAnswer("the model listing has an entry without an id")
            return infos

        return self.call("list the most downloaded models", listing)

    def model_info(self, model_id: str, *, expand: list[str] | None = None) -> Any:
        """One model's info; ConfigError (not_found / gated) for a repo the Hub does not serve."""
        if not is_hub_repo_id(model_id):
            raise ConfigError(f"{model_id!r} is not a Hub repo id", reason=NOT_FOUND)
        try:
            return self.call(
                f"read the info of {model_id}",
                lambda: self.api.model_info(model_id, expand=expand, timeout=self.timeout_s),
                model_failures=True,
            )
        except HubError:
            raise
        except Exception as exc:
            failure = classify(exc)
            raise ConfigError(failure.message, reason=failure.kind, model_id=model_id) from exc

    def fetch_configs(self, model_id: str, *, library: str | None = None) -> ConfigFetch:
        """A snapshot of the repo's config files (the library's `config_patterns`) in the cache."""
        if not is_hub_repo_id(model_id):
            return ConfigFetch(model_id, NOT_FOUND, f"{model_id!r} is not a Hub repo id")
        from huggingface_hub import snapshot_download

        def snapshot() -> str:
            return str(
                snapshot_download(
                    model_id,
                    allow_patterns=list(config_patterns(library)),
                    ignore_patterns=list(IGNORE_PATTERNS),
                    cache_dir=str(self.cache_dir),
                    endpoint=self.endpoint,
                    token=self.token,
                    etag_timeout=self.timeout_s,
                    max_workers=4,
                )
            )

        try:
            folder = Path(
                self.call(f"fetch the configs of {model_id}", snapshot, model_failures=True)
            )
        except HubError:
            raise
        except Exception as exc:
            failure = classify(exc)
            return ConfigFetch(model_id, failure.kind, f"{failure.message} ({model_id})")
        files = tuple(sorted(_config_files(folder)))
        if not files:
            return ConfigFetch(
                model_id,
                NO_CONFIG,
                "the repo has no config.json or model_index.json",
                revision=folder.name,
            )
        return ConfigFetch(model_id, FETCHED, files=files, revision=folder.name, folder=folder)

    def save_configs(self, model_id: str, root: Path, *, library: str | None = None) -> ConfigFetch:
        """`fetch_configs`, copied to `root/<org>/<name>/` with its record; the folder is replaced
        whole, so it is either the last complete fetch or absent."""
        folder = model_folder(root, model_id)
        if folder is None:
            return ConfigFetch(model_id, NOT_FOUND, f"{model_id!r} is not a Hub repo id")
        fetch = self.fetch_configs(model_id, library=library)
        tmp = folder.parent / f".{folder.name}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for rel in fetch.files:
            assert fetch.folder is not None and is_config_file(rel)
            target = tmp.joinpath(*rel.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(fetch.folder.joinpath(*rel.split("/")).read_bytes())
        (tmp / RECORD_NAME).write_text(json.dumps(fetch.record(), indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
        return ConfigFetch(
            model_id, fetch.status, fetch.message, fetch.files, fetch.revision, folder=folder
        )


# How long `unreachable` waits for the Hub's first answer: a run asks once, before planning,
# instead of every model waiting out its own timeout and retries on a machine without the Hub.
PROBE_S = 5.0


def unreachable(*, endpoint: str | None = None, timeout_s: float = PROBE_S) -> str | None:
    """Why the Hub does not answer (None: it answers), from one request of at most
    `timeout_s`: its model listing, limited to one model. Any HTTP answer below 500 (a 401 for
    a bad token included) is the Hub answering; no connection, a timeout or a 5xx is not."""
    import os

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    base = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    try:
        response = get_session().get(f"{base}/api/models?limit=1", timeout=timeout_s)
    except Exception as exc:
        return f"{base}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if response.status_code >= 500:
        return f"{base}: HTTP {response.status_code}"
    return None


def _config_files(folder: Path) -> Iterator[str]:
    if not folder.is_dir():
        return
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and is_config_file(rel):
            yield rel


def _hint() -> str:
    return (
        "check the network and the Hub's status, then rerun (configs already fetched are kept); "
        "HFSWEEP_HUB_TIMEOUT / HFSWEEP_HUB_RETRIES tune the waits; HF_HUB_OFFLINE=1 sweeps the "
        "bundled catalog without the Hub"
    )
