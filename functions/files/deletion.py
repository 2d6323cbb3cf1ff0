"""Deleting a file or a vector store across its stores, in the one safe order: vectors first, then metadata, then the
body. A crash part-way leaves something a retried delete (or the retention sweep) finishes, never vectors of a file
that no longer exists."""

from __future__ import annotations

from functions.files.backends import FileBackends


def delete_file(backends: FileBackends, tenant_id: str, file_id: str) -> None:
    for attachment in backends.files.attachments_of_file(tenant_id, file_id):
        backends.index.remove_file(tenant_id, attachment.vector_store_id, file_id)
    backends.files.delete_file(tenant_id, file_id)
    backends.blobs.delete(tenant_id, file_id)


def delete_store(backends: FileBackends, tenant_id: str, store_id: str) -> None:
    """Its vectors, then its metadata (its files stay, as OpenAI's do)."""
    backends.index.drop_store(tenant_id, store_id)
    backends.files.delete_vector_store(tenant_id, store_id)
