"""What the local engine may open: model paths confined to LOCAL_MODEL_ROOT."""

from __future__ import annotations

import os


def confined_model_path(path: str, root: str | os.PathLike[str] | None) -> str:
    """`path` resolved and proven to lie inside `root`; ValueError, saying why, otherwise.

    os.path.realpath resolves symlinks as well as `..`, so a link under the root that points
    out of it is refused like a literal `../`; commonpath compares whole segments, so
    /models-evil is not under /models. deployments.validation refuses such sources up front;
    this is the check where the path is actually handed to the engine.
    """
    if root is None:
        raise ValueError("No model root is configured (LOCAL_MODEL_ROOT): local paths are refused.")
    if "\x00" in path or not os.path.isabs(path):
        raise ValueError(f"{path!r} is not an absolute path.")
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if real == real_root:
        raise ValueError(f"{path} is the model root itself, not a model inside it.")
    if os.path.commonpath([real_root, real]) != real_root:
        raise ValueError(f"{path} is outside the model root {root}.")
    return real


def engine_model_source(source: str, root: str | os.PathLike[str] | None) -> str:
    """Check what the engine is told to load (`--model`); returns it, or raises ValueError.

    vLLM opens `--model` as a directory when one exists there and asks the hub otherwise: an
    absolute path must be inside the model root, a relative one (a hub id) is read against the
    engine's run directory and may not climb out of it, and nothing spelled for another layer
    to decode (`~`, `file:`, backslashes) is passed on.
    """
    if "\x00" in source or "\\" in source or source.startswith(("~", "file:")):
        raise ValueError(f"{source!r} is neither a hub id nor a path the local engine may open.")
    if source.startswith("/"):
        return confined_model_path(source, root)
    if ".." in source.split("/"):
        raise ValueError(f"{source!r} climbs out of the engine's directory.")
    return source
