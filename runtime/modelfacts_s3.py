"""A model's facts read from a bucket (`s3://bucket/prefix`): the same parsing and limits as a local
directory (runtime.modelfacts.read_model_files), fed by S3 requests instead of file reads.

What is requested: one listing of the objects directly under the prefix (their names and sizes),
then config.json, tokenizer_config.json and model.safetensors.index.json when listed, each with a
ranged GET no longer than its size limit, and for each `*.safetensors` object two ranged GETs: the
8-byte length, then the header it declares once that length passed the limits. The weights are
never downloaded. Every request has a connect and read timeout, and the whole import a deadline.

The endpoint and credentials are arguments (the portal's settings pass them); imports no app.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from runtime.modelfacts import ModelFacts, ModelFactsError, read_model_files

# A bucket name as S3 allows one (and catalog.sources takes), then a key prefix of plain segments.
_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[A-Za-z0-9._/=-]*))?$")
LIST_MAX = 10_000  # objects directly under the prefix; a model directory has tens
_CHUNK = 1024 * 1024  # a body is read in chunks so the deadline holds against a slow sender


@dataclass(frozen=True)
class S3Endpoint:
    """Where the bucket is and how the portal signs in. No access key: boto3's own chain (a web
    identity token, an instance profile) supplies the credentials."""

    url: str | None = None  # None: AWS S3 for `region`
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    timeout_seconds: float = 5.0  # connect and read, per request
    deadline_seconds: float = 30.0  # the whole import


def read_model_s3(uri: str, endpoint: S3Endpoint) -> ModelFacts:
    """The facts of the model under `uri` (s3://bucket/prefix); ModelFactsError for a malformed URI,
    an unreachable endpoint, a missing bucket or object, refused credentials, a deadline passed, and
    everything read_model_files refuses."""
    return read_model_files(S3Files(uri, endpoint))


class S3Files:
    """The objects directly under one prefix of a bucket, as runtime.modelfacts.ModelFiles."""

    def __init__(self, uri: str, endpoint: S3Endpoint):
        match = _URI.fullmatch(uri)
        segments = (match["prefix"] or "").removesuffix("/").split("/") if match else []
        if not match or (match["prefix"] and any(s in ("", ".", "..") for s in segments)):
            raise ModelFactsError(f"{uri}: not an s3://bucket/path URI of plain path segments.")
        self.bucket = match["bucket"]
        self.prefix = "/".join(segments) + "/" if match["prefix"] else ""
        self.endpoint = endpoint
        self.deadline = time.monotonic() + endpoint.deadline_seconds
        self._objects: dict[str, int] | None = None
        # Imported here: boto3 takes a quarter of a second to import, which every portal process
        # (web, worker, beat) would pay at start for an action platform admins take now and then.
        import boto3
        from botocore.config import Config

        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint.url,
            region_name=endpoint.region,
            aws_access_key_id=endpoint.access_key_id,
            aws_secret_access_key=endpoint.secret_access_key,
            aws_session_token=endpoint.session_token,
            config=Config(
                connect_timeout=endpoint.timeout_seconds,
                read_timeout=endpoint.timeout_seconds,
                # One retry for a dropped connection or a throttle; more would stretch a failing
                # import past the web request's own timeout.
                retries={"max_attempts": 2, "mode": "standard"},
            ),
        )

    def where(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{name}"

    def size(self, name: str) -> int | None:
        return self._listing().get(name)

    def names(self, suffix: str) -> list[str]:
        return sorted(name for name in self._listing() if name.endswith(suffix))

    def read(self, name: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        self._in_time(name)
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self.prefix + name, Range=f"bytes={start}-{start + length - 1}"
            )
            ranged = "ContentRange" in response
            if start > 0 and not ranged:
                response["Body"].close()
                raise ModelFactsError(f"{self.where(name)}: the endpoint ignored a ranged GET; refused.")
            return self._body(response["Body"], name, length)
        except (BotoCoreError, ClientError) as error:
            raise self._error(error, name) from None

    # -----------------------------------------------------------------------------------------

    def _listing(self) -> dict[str, int]:
        """Name → size of the objects directly under the prefix (one listing, then kept)."""
        if self._objects is not None:
            return self._objects
        objects: dict[str, int] = {}
        kwargs = {"Bucket": self.bucket, "Prefix": self.prefix, "Delimiter": "/", "MaxKeys": 1000}
        try:
            while True:
                self._in_time("")
                page = self.client.list_objects_v2(**kwargs)
                for entry in page.get("Contents", []):
                    name = entry["Key"][len(self.prefix) :]
                    if name:  # the prefix's own "folder" marker is no file
                        objects[name] = int(entry["Size"])
                if len(objects) > LIST_MAX:
                    raise ModelFactsError(f"{self.where('')}: more than {LIST_MAX} objects; not a model directory.")
                if not page.get("IsTruncated"):
                    break
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except (BotoCoreError, ClientError) as error:
            raise self._error(error, "") from None
        if not objects:
            raise ModelFactsError(f"{self.where('')}: no objects under this prefix; not a model directory.")
        self._objects = objects
        return objects

    def _body(self, body, name: str, length: int) -> bytes:
        """At most `length` bytes of a response body, in chunks, within the deadline; the rest of
        the body (a server that sent more than the range) is never read."""
        chunks, left = [], length
        try:
            while left > 0:
                self._in_time(name)
                chunk = body.read(min(left, _CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            body.close()
        return b"".join(chunks)

    def _in_time(self, name: str) -> None:
        if time.monotonic() > self.deadline:
            raise ModelFactsError(
                f"{self.where(name)}: not read within {self.endpoint.deadline_seconds:g} s; "
                "the endpoint is too slow or the model has too many files."
            )

    def _error(self, error: Exception, name: str) -> ModelFactsError:
        """A clear message for what S3 or the connection said; never the credentials."""
        where = self.where(name)
        endpoint = self.endpoint.url or f"AWS S3 ({self.endpoint.region})"
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return ModelFactsError(f"s3://{self.bucket}: no such bucket at {endpoint}.")
            if code in ("NoSuchKey", "404") or status == 404:
                return ModelFactsError(f"{where}: no such object at {endpoint}.")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
                return ModelFactsError(f"{where}: {endpoint} refused the portal's S3 credentials ({code}).")
            if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
                return ModelFactsError(f"{where}: access denied at {endpoint} for the portal's S3 credentials.")
            message = str(error.response.get("Error", {}).get("Message", ""))[:200]
            return ModelFactsError(f"{where}: {endpoint} answered {code or status}: {message}")
        if isinstance(error, NoCredentialsError):
            return ModelFactsError(f"{where}: the portal has no S3 credentials for {endpoint}.")
        if isinstance(error, BotoConnectionError):  # refused, connect timeout, DNS, proxy
            return ModelFactsError(f"{where}: {endpoint} is unreachable ({type(error).__name__}).")
        if isinstance(error, HTTPClientError):  # read timeout, connection closed mid-answer
            return ModelFactsError(f"{where}: {endpoint} stopped answering ({type(error).__name__}).")
        return ModelFactsError(f"{where}: reading from {endpoint} failed ({type(error).__name__}).")
