"""The persistent compilation cache: where compiled programs are kept between processes, and
whether a compile came from a cache.

JAX's persistent cache (`jax_compilation_cache_dir`) stores each executable under a key of its
program, options, XLA flags and JAX version; a later process that compiles the same program reads
it from disk instead of compiling. xlafuse's commands turn it on for the command's duration, in
the user's cache folder (`default_folder`: `$XDG_CACHE_HOME/xlafuse/jax`, else
`~/.cache/xlafuse/jax`), unless `--no-cache` or `XLAFUSE_NO_CACHE=1` says not to. The Python API
(`xlafuse.compile`, `xlafuse.compare`, `xlafuse.measure`) leaves JAX's setting as the user made
it; `use_cache` turns it on for a block.

A compile served from a cache is not a compile time. `cache_events` counts JAX's own monitoring
events over a block: a persistent-cache hit ('/jax/compilation_cache/cache_hits'), an entry
written ('cache_misses') and each backend compile; `from_cache` reads a compile's counts as
served from the persistent cache or from JAX's in-memory cache (no backend compile at all: the
same program compiled earlier in this process).

Cold start (`xlafuse.measurement.coldstart`) measures compiles in its own children, each with its
own cache folder or none (`apply_settings`), never this one.

`xlafuse inspect --workload` also keeps what a compile gave it, beside the executables: the
optimized HLO text and the few fields of its result that the HLO does not hold, in
`results_folder()` (`.../xlafuse/inspect`), under `result_key`: a hash of everything the program
depends on that xlafuse can name (the cell, the variant's options, the devices, JAX, jaxlib,
xlafuse's version and its own source files, the installed packages, the user's source files, the
XLA and JAX environment variables). The second inspect of the same program reads that HLO and
neither builds nor traces it. The same switches turn it off. An entry that cannot be read, or
whose HLO is not what was stored, is no entry (`read_stored`): the program is compiled again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jaxlib
from jax._src import monitoring  # the only place the persistent-cache events are published
from jax.experimental.compilation_cache import compilation_cache

NO_CACHE_ENV = "XLAFUSE_NO_CACHE"  # set to 1: xlafuse's commands compile without the cache

CACHE_HITS = "/jax/compilation_cache/cache_hits"
CACHE_MISSES = "/jax/compilation_cache/cache_misses"
# Recorded (with its duration) around each compile that reaches the backend, whether the
# persistent cache then serves it or XLA compiles it; an in-memory cache hit records none.
BACKEND_COMPILES = "/jax/core/compile/backend_compile_duration"

CACHE_ENTRY_SUFFIX = "-cache"  # jax's LRU file cache writes KEY-cache (and KEY-atime) files

RESULTS_FOLDER = "inspect"  # beside the executables' folder: what `inspect --workload` compiled
RESULT_FORMAT = "xlafuse.inspect-cache/1"  # in every stored entry and in every key
RESULT_META_SUFFIX = ".json"  # KEY.json: the result's fields, when it was written, its HLO's hash
RESULT_HLO_SUFFIX = ".hlo"  # KEY.hlo: the optimized HLO text
# Environment variables whose values can change a compiled program (XLA_FLAGS, JAX_* settings).
ENVIRONMENT_PREFIXES = ("XLA_", "JAX_", "XLAFUSE_", "TF_XLA_", "TPU_", "LIBTPU_")
_PACKAGE = Path(__file__).resolve().parents[1]  # xlafuse's own folder


def default_folder(*, environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder of xlafuse's commands: `$XDG_CACHE_HOME/xlafuse/jax`, or
    `~/.cache/xlafuse/jax` where XDG_CACHE_HOME is unset or empty."""
    environ = os.environ if environ is None else environ
    root = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "xlafuse" / "jax"


def disabled_by_env(*, environ: Mapping[str, str] | None = None) -> bool:
    """Whether `XLAFUSE_NO_CACHE` turns the commands' cache off (any value but empty or 0)."""
    environ = os.environ if environ is None else environ
    return environ.get(NO_CACHE_ENV, "").strip() not in ("", "0")


def cache_entry_count(cache_dir: str | os.PathLike | None) -> int:
    """Number of executables stored in a persistent-cache folder (0 if it does not exist)."""
    if cache_dir is None or not Path(cache_dir).is_dir():
        return 0
    return sum(1 for p in Path(cache_dir).iterdir() if p.name.endswith(CACHE_ENTRY_SUFFIX))


def cache_settings(cache_dir: str | os.PathLike) -> dict[str, Any]:
    """The JAX config values that make every compiled executable go to `cache_dir`.

    JAX's defaults skip programs that compiled in under 1 s or are small; xlafuse keeps all:
    a tiny program is read back as fast as a large one.
    """
    return {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(cache_dir),
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": -1,
    }


def apply_settings(cache_dir: str | os.PathLike | None) -> None:
    """Point this process's persistent cache at `cache_dir`, or turn it off (None), whatever
    its environment says (`JAX_COMPILATION_CACHE_DIR` included): for a child process that
    measures compiles, before its first compile."""
    settings = cache_settings(cache_dir) if cache_dir else {"jax_enable_compilation_cache": False}
    compilation_cache.reset_cache()
    for key, value in settings.items():
        jax.config.update(key, value)


@contextlib.contextmanager
def persistent_cache(cache_dir: str | os.PathLike, *, xla_caches: bool = True) -> Iterator[Path]:
    """Point this process's persistent compilation cache at `cache_dir` for the `with` block.

    JAX decides once per process whether the cache is used (at the first compile), so the cache
    is reset on entry and on exit, and the in-memory caches are cleared on entry: a function
    compiled earlier in this process would otherwise never reach the disk. The previous settings
    are restored on exit.

    Args:
      cache_dir: the folder.
      xla_caches: also keep XLA's own caches there (JAX's default: on a GPU, each fusion's
        autotuning results, which make a later compile of another program faster); False
        keeps whole executables only, so that a compile the folder does not serve is whole.

    Yields:
      The cache folder (created if missing).
    """
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    settings = cache_settings(folder)
    if not xla_caches:
        settings["jax_persistent_cache_enable_xla_caches"] = "none"
    with _settings(settings):
        jax.clear_caches()
        yield folder


@contextlib.contextmanager
def no_persistent_cache() -> Iterator[None]:
    """No persistent cache for the `with` block, whatever JAX was set to (the previous
    settings are restored on exit)."""
    with _settings({"jax_enable_compilation_cache": False}):
        yield


def use_cache(*, cache_dir: str | os.PathLike | None = None) -> contextlib.AbstractContextManager:
    """The persistent cache of xlafuse's commands, for the `with` block (the commands enter it
    around their work; the Python API, where the user asks).

    `with use_cache(): xlafuse.compare(fn, x)` (`from xlafuse.compiler.cache import use_cache`)
    reads and fills the same folder as the commands do; a compile served from it shows as
    cached. It keeps whole executables only (`persistent_cache(..., xla_caches=False)`): a
    compile it does not serve is a whole compile, timed as one, never one sped up by another
    program's autotuning. Nothing is ever removed from it (JAX's size limit needs the
    `filelock` package): delete the folder to empty it.

    Args:
      cache_dir: the folder (default: `default_folder()`); created if missing.
    """
    folder = default_folder() if cache_dir is None else cache_dir
    return persistent_cache(folder, xla_caches=False)


@contextlib.contextmanager
def _settings(settings: Mapping[str, Any]) -> Iterator[None]:
    """JAX config values for the block, the cache re-decided on entry and on exit."""
    before = {key: getattr(jax.config, key) for key in settings}
    compilation_cache.reset_cache()
    for key, value in settings.items():
        jax.config.update(key, value)
    try:
        yield
    finally:
        compilation_cache.reset_cache()
        for key, value in before.items():
            jax.config.update(key, value)


@contextlib.contextmanager
def cache_events() -> Iterator[dict[str, int]]:
    """Counts of persistent-cache hits, entries written and backend compiles (CACHE_HITS,
    CACHE_MISSES, BACKEND_COMPILES) in the block, from JAX's monitoring events."""
    counts = {CACHE_HITS: 0, CACHE_MISSES: 0, BACKEND_COMPILES: 0}

    def on_event(event: str, **kwargs) -> None:
        if event in counts:
            counts[event] += 1

    def on_duration(event: str, duration: float, **kwargs) -> None:
        on_event(event)

    monitoring.register_event_listener(on_event)
    monitoring.register_event_duration_secs_listener(on_duration)
    try:
        yield counts
    finally:
        monitoring.unregister_event_listener(on_event)
        monitoring.unregister_event_duration_listener(on_duration)


def from_cache(counts: Mapping[str, int]) -> bool:
    """Whether the one compile that `counts` (`cache_events`) saw was served from a cache:
    the persistent cache hit, or no compile reached the backend (JAX's in-memory cache)."""
    return counts[CACHE_HITS] > 0 or counts[BACKEND_COMPILES] == 0


def results_folder(*, environ: Mapping[str, str] | None = None) -> Path:
    """Where `inspect --workload` keeps what it compiled: `inspect` beside `default_folder()`."""
    return default_folder(environ=environ).parent / RESULTS_FOLDER


def result_key(
    identity: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> str | None:
    """The key of a stored compile: the SHA-256 (hex) of `identity` (what the caller built and
    under which options) and of everything else the program depends on (`program_context`,
    `environment_settings`); None when `identity` is not JSON (then nothing is stored).

    Args:
      identity: JSON-able values that name the program (a cell, a variant's options, the
        user's source files' hashes); mappings may be `MappingProxyType`s, sequences tuples.
      environ: the environment (default: `os.environ`).
    """
    whole = {
        "format": RESULT_FORMAT,
        "identity": identity,
        "context": program_context(),
        "environment": environment_settings(environ=environ),
    }
    try:
        text = json.dumps(_plain(whole), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def program_context() -> dict[str, Any]:
    """What a compiled program depends on besides what it is: Python, JAX, jaxlib and xlafuse
    (its version and its source files, `package_sources_sha256`), the installed packages
    (`installed_packages`), the machine, the backend, its device kind and version and the
    devices and processes it has (the backend is started if it was not)."""
    from xlafuse import __version__  # the package's own version (docs/architecture.md)

    device = jax.devices()[0]
    return {
        "python": sys.version,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "xlafuse": __version__,
        "xlafuse_sources": package_sources_sha256(),
        "packages": installed_packages(),
        "machine": platform.machine(),
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "platform_version": getattr(device.client, "platform_version", None),
        "devices": jax.device_count(),
        "processes": jax.process_count(),
    }


def package_sources_sha256(*, again: bool = False) -> str:
    """SHA-256 (hex) of xlafuse's own Python files (each one's path and bytes, sorted by path):
    the zoo, the compile path and whatever else shapes a program. Hashed once per process
    (a few milliseconds), again with `again=True`."""
    if again:
        _package_sources_sha256.cache_clear()
    return _package_sources_sha256()


@functools.cache
def _package_sources_sha256() -> str:
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@functools.cache
def installed_packages() -> str:
    """SHA-256 (hex) of the installed distributions' metadata folder names (`NAME-VERSION
    .dist-info`) on `sys.path`: another version of any package is another key."""
    names = []
    for entry in sys.path:
        try:
            names += [
                n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
            ]
        except OSError:
            continue
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def environment_settings(*, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that can change a compiled program (`ENVIRONMENT_PREFIXES`:
    XLA_FLAGS, JAX's settings, ...), `XLAFUSE_NO_CACHE` left out."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in sorted(environ.items())
        if name.startswith(ENVIRONMENT_PREFIXES) and name != NO_CACHE_ENV
    }


@dataclasses.dataclass(frozen=True)
class StoredCompile:
    """One stored compile of `inspect --workload` (`read_stored`).

    Attributes:
      hlo_path: the file of its optimized HLO text.
      hlo_sha256: SHA-256 (hex) of that text as it was written (a reader checks it).
      fields: what the result holds besides the HLO (`xlafuse.inspect.targets.stored_fields`).
      written: when it was written (ISO 8601, local time, to the second).
    """

    hlo_path: Path
    hlo_sha256: str
    fields: Mapping[str, Any]
    written: str


def stored_paths(folder: str | os.PathLike, key: str) -> tuple[Path, Path]:
    """(KEY.json, KEY.hlo) in `folder`: an entry's fields and its HLO text."""
    folder = Path(folder)
    return folder / f"{key}{RESULT_META_SUFFIX}", folder / f"{key}{RESULT_HLO_SUFFIX}"


def stored_meta(key: str, hlo_text: str, fields: Mapping[str, Any], written: str) -> str:
    """The text of an entry's KEY.json: its format, key, fields, when it was written and its
    HLO's hash (write KEY.hlo first: an entry without its HLO is no entry)."""
    meta = {
        "format": RESULT_FORMAT,
        "key": key,
        "written": written,
        "hlo_sha256": hashlib.sha256(hlo_text.encode()).hexdigest(),
        "fields": fields,
    }
    return json.dumps(_plain(meta), indent=1, sort_keys=True)


def read_stored(folder: str | os.PathLike, key: str) -> StoredCompile | None:
    """The entry stored under `key` in `folder`; None when there is none, or it cannot be read,
    is of another format or key, or lacks its HLO file (never an error: compile again)."""
    meta_path, hlo_path = stored_paths(folder, key)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        stored = StoredCompile(hlo_path, meta["hlo_sha256"], meta["fields"], meta["written"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    usable = (
        meta.get("format") == RESULT_FORMAT
        and meta.get("key") == key
        and isinstance(stored.fields, dict)
        and isinstance(stored.hlo_sha256, str)
        and isinstance(stored.written, str)
        and hlo_path.is_file()
    )
    return stored if usable else None


def _plain(value: Any) -> Any:
    """`value` with its mappings as dicts and its tuples as lists (what JSON takes)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value
