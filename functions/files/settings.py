"""Files' knobs (`FLEETCHAT_FILES_*`): the ingestion lease, and how old an orphaned body must be before the retention
job deletes it."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FilesSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETCHAT_FILES_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    # How long a gateway's claim on ingesting a file lasts; renewed every third of it while the file ingests. A
    # replica that dies holds the file this long at most: another one takes it over at its next look (as often).
    ingestion_lease_s: float = Field(default=30.0, ge=0.5, le=3600.0)
    # A body in the object store with no file metadata (a crash between the put and the insert) is deleted by the
    # retention job once it is this old: younger, it may be an upload whose insert is a moment away.
    orphan_grace_s: float = Field(default=3600.0, ge=0.0)
