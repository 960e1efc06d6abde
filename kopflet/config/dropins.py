"""``--config-dir``: KubeletConfiguration drop-ins merged onto the ``--config`` file, as upstream's kubelet does.

Upstream (cmd/kubelet/app/server.go ``mergeKubeletConfigurations``, KEP-3983, GA and without a feature gate since):

* the directory is walked as Go's ``filepath.WalkDir`` walks it: recursively, each directory's entries in lexical
  (byte) order, a subdirectory's files where its name sorts; symbolic links are not followed (a link is a file);
  the directory must exist;
* a file whose ``filepath.Ext`` is not ``.conf`` is skipped (logged at V(4) upstream);
* each ``.conf`` file is decoded leniently into an unstructured object: bad YAML, a duplicate key (the strict
  decoder's only complaint about an unstructured object), no ``kind`` and a kind other than
  ``kubelet.config.k8s.io/v1beta1`` KubeletConfiguration are errors; an unknown field is not (the merged JSON is
  then unmarshalled with ``encoding/json``, which drops it);
* each drop-in is a JSON merge patch (RFC 7386, ``jsonpatch.MergePatch``) on the configuration so far: scalars and
  lists are replaced whole, maps and structs merged key by key, ``null`` removes a key (the field is defaulted
  again afterwards);
* relative paths in a drop-in are *not* resolved against its directory (``LoadIntoJSON`` skips
  ``resolveRelativePaths``, which ``--config`` gets): they stay relative to the kubelet's working directory.

The merge base upstream is the whole defaulted configuration; the only map field whose default is not empty is
``evictionHard`` (loadConfigFile puts the defaults in when the ``--config`` file leaves it out, or fills the signals
it leaves out under ``mergeDefaultEvictionSettings``), so :func:`merge_base` puts those in before the merge.

Everything here is pure: the directory listing and the files' text come from the callables the caller passes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from kopflet import gotext
from kopflet.eviction import thresholds

DROPIN_EXTENSION = ".conf"
API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"

# A directory's entries: (name, is a directory (not following a symbolic link)); None when the path itself is not a
# directory by lstat (WalkDir then visits it as a file). Raises OSError as lstat or opendir would.
ReadDir = Callable[[str], "Sequence[tuple[str, bool]] | None"]
# The text of a file; raises OSError as open or read would.
ReadFile = Callable[[str], str]

# encoding/json's name for the Go type meta.Interpret decodes apiVersion and kind into.
_TYPE_META = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'


class DropInError(ValueError):
    """A drop-in directory or file is unusable; the message is upstream's."""


def go_ext(name: str) -> str:
    """Go's ``filepath.Ext``: the suffix from the last dot of the last element (``.conf`` of ``.conf`` too)."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 and "/" not in name[dot:] else ""


def _os_error(op: str, path: str, exc: OSError) -> str:
    """An OSError as Go's ``*PathError`` prints it: ``open /x: permission denied``."""
    reason = exc.strerror or str(exc)
    return f"{op} {path}: {reason[:1].lower()}{reason[1:]}"


def _walk_error(root: str, message: str) -> DropInError:
    return DropInError(f"failed to merge kubelet configs: failed to walk through kubelet dropin directory "
                       f"{gotext.go_quote(root)}: {message}")


def walk(root: str, read_dir: ReadDir) -> tuple[list[str], list[str]]:
    """The drop-in files in the order upstream applies them, and the files skipped (not ``.conf``)."""
    files: list[str] = []
    skipped: list[str] = []

    def visit(path: str, name: str, is_root: bool) -> None:
        try:
            entries = read_dir(path)
        except OSError as exc:
            # WalkDir: lstat of the root fails first when it is missing; opening a directory fails otherwise.
            missing = is_root and isinstance(exc, FileNotFoundError | NotADirectoryError)
            raise _walk_error(root, _os_error("lstat" if missing else "open", path, exc)) from None
        if entries is None:  # not a directory: a file (only the root can get here; entries say is_dir)
            (files if go_ext(name) == DROPIN_EXTENSION else skipped).append(path)
            return
        for entry, is_dir in sorted(entries):
            child = posixpath.normpath(posixpath.join(path, entry))  # filepath.Join cleans
            if is_dir:
                visit(child, entry, False)
            else:
                (files if go_ext(entry) == DROPIN_EXTENSION else skipped).append(child)

    visit(root, posixpath.basename(root.rstrip("/")) or root, True)
    return files, skipped


class _DropInLoader(yaml.SafeLoader):
    """SafeLoader keeping the last of a duplicate key, as YAMLToJSON does, and noting it for the strict check."""

    duplicates: list[str]


def _construct_mapping(loader: _DropInLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            key = str(key)  # an unhashable key: YAMLToJSON would write it as a string
            duplicate = key in seen
        if duplicate:
            shown = gotext.go_quote(key) if isinstance(key, str) else str(key)
            loader.duplicates.append(f"line {key_node.start_mark.line + 1}: key {shown} already set in map")
        seen.add(key)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_DropInLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string"


def _group_version_kind(body: Mapping[Any, Any]) -> str:
    """schema.GroupVersionKind.String() of an unstructured object's apiVersion and kind."""
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    api_version = api_version if isinstance(api_version, str) else ""
    kind = kind if isinstance(kind, str) else ""
    if api_version.count("/") > 1:  # ParseGroupVersion fails: FromAPIVersionAndKind keeps the kind only
        group, version = "", ""
    elif "/" in api_version:
        group, version = api_version.split("/")
    else:
        group, version = "", api_version
    return f"{group}/{version}, Kind={kind}"


def parse_dropin(path: str, absolute: str, text: str) -> dict[str, Any]:
    """One drop-in's document as an unstructured object; upstream's errors for a bad one.

    ``path`` is the file as the walk names it, ``absolute`` as filepath.Abs makes it (the loader's messages)."""
    def failed(message: str) -> DropInError:
        return DropInError(f"failed to load kubelet dropin file, path: {path}, error: {message}")

    if not text:
        raise failed(f"kubelet config file {gotext.go_quote(absolute)} was empty")
    loader = _DropInLoader(text)
    loader.duplicates = []
    try:
        node = loader.get_node() if loader.check_node() else None  # YAMLToJSON reads the first document only
        body = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise failed(f"error converting YAML to JSON: yaml: {line}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise failed(f"error converting YAML to JSON: yaml: {exc}") from None
    finally:
        loader.dispose()
    if body is not None and not isinstance(body, Mapping):
        raise failed(f"couldn't get version/kind; json parse error: json: cannot unmarshal {_json_type(body)} "
                     f"into Go value of type {_TYPE_META}")
    if body is None or not isinstance(body.get("kind"), str) or not body.get("kind"):
        raise failed(f"Object 'Kind' is missing in '{text}'")
    if loader.duplicates:
        raise failed("strict decoding error: error converting YAML to JSON: yaml: unmarshal errors:\n  "
                     + "\n  ".join(loader.duplicates))
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise DropInError(f"failed to load kubelet dropin file, path: {path}, unknown apiVersion/kind: "
                          f"{_group_version_kind(body)}")
    return {str(k): v for k, v in body.items()}


def _prune_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``jsonpatch.MergePatch``): maps merged key by key, ``null`` deletes a key,
    anything else (scalars, lists) replaces; the inputs are not changed."""
    if not isinstance(patch, Mapping):
        return patch
    if not isinstance(target, Mapping):
        return _prune_nulls(patch)
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in result and result[key] is not None:
            result[key] = merge_patch(result[key], value)
        else:
            result[key] = _prune_nulls(value)
    return result


def merge_base(config_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The configuration drop-ins merge onto: the ``--config`` document (empty without one) with evictionHard as
    upstream's loadConfigFile leaves it (defaults when unset; with mergeDefaultEvictionSettings, the signals it
    leaves out filled from the defaults). Without ``--config`` upstream's evictionHard is unset."""
    if config_body is None:
        return {}
    body = dict(config_body)
    hard = body.get("evictionHard")
    if hard is None:
        body["evictionHard"] = dict(thresholds.DEFAULT_EVICTION_HARD)
    elif isinstance(hard, Mapping) and body.get("mergeDefaultEvictionSettings") is True:
        body["evictionHard"] = {**thresholds.DEFAULT_EVICTION_HARD, **hard}
    return body


def merge(base: Mapping[str, Any], config_dir: str, read_dir: ReadDir, read_file: ReadFile, cwd: str,
          check: Callable[[Mapping[str, Any]], str | None] = lambda _: None) -> tuple[dict[str, Any], list[str]]:
    """The drop-ins of ``config_dir`` merged onto ``base`` in order, and the skipped files.

    ``check(document)`` may refuse a drop-in (kopflet: a field it does not support) with a message."""
    files, skipped = walk(config_dir, read_dir)
    merged: dict[str, Any] = dict(base)
    for path in files:
        absolute = posixpath.normpath(posixpath.join(cwd, path))
        try:
            text = read_file(path)
        except OSError as exc:
            op = "read" if isinstance(exc, IsADirectoryError) else "open"
            raise _walk_error(config_dir, f"failed to load kubelet dropin file, path: {path}, error: failed to read "
                                          f"drop-in kubelet config file {gotext.go_quote(absolute)}, error: "
                                          f"{_os_error(op, absolute, exc)}") from None
        try:
            document = parse_dropin(path, absolute, text)
        except DropInError as exc:
            raise _walk_error(config_dir, str(exc)) from None
        problem = check(document)
        if problem:
            raise _walk_error(config_dir, f"failed to load kubelet dropin file, path: {path}, error: {problem}")
        merged = merge_patch(merged, {k: v for k, v in document.items() if k not in ("apiVersion", "kind")})
    return merged, skipped
