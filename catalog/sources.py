"""The syntax of a model source and of a pinned revision: the one place these rules live.

The deployment request (deployments.validation), the catalog's rows (catalog.models) and the
tenant policy's source patterns (catalog.patterns) all ask here, so a source the catalog takes
is one a request takes, and the other way round.
"""

from __future__ import annotations

import re

from django.conf import settings

from runtime.backends.local.paths import confined_model_path

HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/=-]*)?$")
PVC_URI = re.compile(r"^pvc://([a-z0-9]([-a-z0-9]*[a-z0-9])?)(/[A-Za-z0-9._/-]*)?$")
LOCAL_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
SOURCE_FORMS = "Use a Hugging Face id (org/model), an s3://bucket/path URI or pvc://claim/path"

REVISION_MAX = 100
COMMIT_ID = re.compile(r"^[0-9a-f]{40}$")
# A git ref name (git check-ref-format) held to the characters that are safe in an engine flag and
# in YAML: letters, digits, '.', '_', '-', '/'. The rest of check-ref-format's rules are in
# revision_error.
_REF_CHARS = re.compile(r"^[A-Za-z0-9._/-]+$")


def source_kind(source: str) -> str:
    """ "hf", "s3", "pvc" or "local" for a source that passed source_error ("" otherwise)."""
    if S3_URI.fullmatch(source):
        return "s3"
    if PVC_URI.fullmatch(source):
        return "pvc"
    if HF_ID.fullmatch(source):
        return "hf"
    return "local" if LOCAL_PATH.fullmatch(source) else ""


def source_error(source: str, *, local_paths: bool) -> str | None:
    """Why `source` cannot be a model source, or None. `local_paths`: whether a path on this
    machine is a source here (the local backend's; the catalog keeps them for it).

    A source becomes a path somewhere: `pvc://claim/p` is mounted at /models/claim/p in the
    worker pod, an s3:// key is downloaded under the engine's model directory, a local path is
    what the local engine opens. So no segment may climb (`..`), stand still (`.`) or be empty
    (`//`, which also makes the rest absolute: pvc://claim//etc), and nothing may be spelled
    in a way a later layer decodes into one of those (percent-encoding, backslashes). Local
    paths must also resolve, symlinks included, inside LOCAL_MODEL_ROOT.
    """
    if not source:
        return "Enter a model source."
    if any(not 0x20 < ord(char) < 0x7F for char in source):
        return "No spaces, control characters or non-ASCII in a model source."
    if "%" in source:
        return "No percent-encoding in a model source: write the path as it is."
    if "\\" in source:
        return "No backslashes in a model source: separate path segments with '/'."
    scheme, has_scheme, path = source.partition("://")
    if has_scheme and scheme not in ("s3", "pvc"):
        return accepted_forms(local_paths)
    segments = (path if has_scheme else source).removesuffix("/").split("/")  # a trailing "/" is harmless
    if source.startswith("/"):
        segments = segments[1:]  # an absolute path's leading root
    if ".." in source or any(segment in ("", ".") for segment in segments):
        return "A model source may not contain '..', or empty or '.' path segments."
    if HF_ID.fullmatch(source) or S3_URI.fullmatch(source) or PVC_URI.fullmatch(source):
        return None
    if local_paths and LOCAL_PATH.fullmatch(source):
        try:
            confined_model_path(source, settings.LOCAL_MODEL_ROOT)
        except ValueError as error:
            return str(error)
        return None
    return accepted_forms(local_paths)


def accepted_forms(local_paths: bool) -> str:
    return SOURCE_FORMS + (f" or a path under {settings.LOCAL_MODEL_ROOT}." if local_paths else ".")


def revision_error(revision: str, *, source: str | None = None) -> str | None:
    """Why `revision` cannot be a pinned Hugging Face revision (of `source`, when given), or None
    ("" is no revision).

    A 40-character commit id, or a tag or branch name as git allows one (git check-ref-format)
    in the characters an engine flag and YAML take as they are. It reaches vLLM as
    `--revision <value>`: a leading '-' would read as another flag, so none may start with one.
    """
    if not revision:
        return None
    if len(revision) > REVISION_MAX:
        return f"At most {REVISION_MAX} characters."
    if COMMIT_ID.fullmatch(revision):
        return None
    if not _REF_CHARS.fullmatch(revision):
        return "A commit id (40 hex digits) or a tag or branch name: letters, digits, '.', '_', '-' and '/' only."
    parts = revision.split("/")
    if (
        revision.startswith(("-", "/"))
        or revision.endswith(("/", "."))
        or ".." in revision
        or any(not part or part.startswith(".") or part.endswith(".lock") for part in parts)
    ):
        return (
            "Not a git tag or branch name: no leading '-' or '/', no '..', no empty segment, "
            "no segment starting with '.' or ending with '.lock', no trailing '/' or '.'."
        )
    if source is not None and source_kind(source) != "hf":
        return "Only Hugging Face models have revisions: leave it empty for this source."
    return None
