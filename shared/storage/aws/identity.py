"""Where the deployed functions' AWS credentials come from: Modal's OIDC identity token, handed to boto3's web-identity
provider, which trades it for the service role's short-lived credentials (infra/terraform/iam.tf).

Modal injects the token as the environment variable `MODAL_IDENTITY_TOKEN`; boto3's provider reads a token *file*
named by `AWS_WEB_IDENTITY_TOKEN_FILE` (beside `AWS_ROLE_ARN`, which the `fleetchat-secrets` secret carries). So the
token is written to a private file once per container, before any boto3 session resolves credentials. boto3 then calls
`sts:AssumeRoleWithWebIdentity` itself and refreshes the role's credentials before they expire, re-reading the file.
https://modal.com/docs/guide/oidc-integration

Example, at the top of the Modal app file (a no-op outside Modal, or without `AWS_ROLE_ARN`):

    use_modal_identity_token(os.environ)
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

MODAL_TOKEN_ENV = "MODAL_IDENTITY_TOKEN"
ROLE_ARN_ENV = "AWS_ROLE_ARN"
TOKEN_FILE_ENV = "AWS_WEB_IDENTITY_TOKEN_FILE"
SESSION_NAME_ENV = "AWS_ROLE_SESSION_NAME"
# The role session's name in CloudTrail; the token's sub (workspace, app, function, container) is logged beside it.
SESSION_NAME = "fleetchat-modal"

logger = logging.getLogger(__name__)


def use_modal_identity_token(environ: MutableMapping[str, str], directory: Path | None = None) -> Path | None:
    """With a Modal identity token and a role to assume, point boto3's web-identity provider at the token; returns the
    token file (None: nothing to do). An operator's own `AWS_WEB_IDENTITY_TOKEN_FILE` is left alone.

    Static keys (`AWS_ACCESS_KEY_ID`) come first in boto3's credential chain and win over the role: they are left in
    charge, with a warning, since the secret most likely still holds the old IAM user's key."""
    token, role_arn = environ.get(MODAL_TOKEN_ENV), environ.get(ROLE_ARN_ENV)
    if not token or not role_arn or environ.get(TOKEN_FILE_ENV):
        return None
    if environ.get("AWS_ACCESS_KEY_ID"):
        logger.warning(
            "%s and AWS_ACCESS_KEY_ID are both set: boto3 uses the static key, not the role; remove "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the Modal secret",
            ROLE_ARN_ENV,
        )
        return None
    path = (directory or Path(tempfile.gettempdir())) / "fleetchat-modal-identity-token"
    # Owner-only from the first byte: the token is a credential for as long as it lives.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token)
    os.chmod(path, 0o600)  # O_CREAT's mode is not applied to a file that already existed
    environ[TOKEN_FILE_ENV] = str(path)
    environ.setdefault(SESSION_NAME_ENV, SESSION_NAME)
    return path
