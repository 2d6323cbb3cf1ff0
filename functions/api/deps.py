"""The gateway's services as FastAPI dependencies: a handler declares what it uses with an `Annotated` alias, and
nothing fetches `app.state` by hand (the services are built once, in `create_app` and its lifespan)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import httpx
from fastapi import Depends, Request

from functions.account_data import AccountData
from functions.accounts.conversation_search import ConversationSearch
from functions.accounts.sessions import SessionSigner
from functions.batches.service import BatchesService
from functions.chat.instructions import Instructions
from functions.chat.memory import MemoryService
from functions.chat.pipeline import ChatPipeline
from functions.chat.server_tools.service import ServerTools
from functions.chat.service import ChatService
from functions.chat.streams.resumable import ResumableStreams
from functions.completions.service import CompletionsService
from functions.control.canary import Canaries
from functions.control.pool_overflow import PoolControl
from functions.control.request_accounting import Accounting
from functions.embedding_service import EmbeddingService
from functions.feedback.service import FeedbackService
from functions.files.files_service import FilesService
from functions.files.search import VectorStoreSearch
from functions.files.vector_stores import VectorStoresService
from functions.metrics.gateway import GatewayMetrics
from functions.rerank_service import RerankService
from functions.responses.service import ResponsesService
from functions.retrieval.service import Retrieval
from functions.safety.moderation_service import ModerationService
from functions.shares.service import ShareService
from shared.settings import Settings
from shared.storage.accounts import TenantStore
from shared.storage.conversations import ConversationStore
from shared.storage.ledger import LedgerStore
from shared.storage.safety_audit import SafetyAuditStore


def _state(name: str) -> Callable[[Request], Any]:
    """A dependency that hands the handler the service `create_app` installed under `name`."""

    def installed(request: Request) -> Any:
        return getattr(request.app.state, name)

    installed.__name__ = f"installed_{name}"
    return installed


SettingsDep = Annotated[Settings, Depends(_state("settings"))]
MetricsDep = Annotated[GatewayMetrics, Depends(_state("metrics"))]
HttpClientDep = Annotated[httpx.AsyncClient, Depends(_state("http"))]
WorkerUrlsDep = Annotated[dict[str, list[str]], Depends(_state("worker_urls"))]
# chat
ChatPipelineDep = Annotated[ChatPipeline, Depends(_state("chat_pipeline"))]
ChatServiceDep = Annotated[ChatService, Depends(_state("chat"))]
ServerToolsDep = Annotated[ServerTools, Depends(_state("server_tools"))]
ResumableStreamsDep = Annotated[ResumableStreams, Depends(_state("resumable"))]
CompletionsServiceDep = Annotated[CompletionsService, Depends(_state("completions"))]
ResponsesServiceDep = Annotated[ResponsesService, Depends(_state("responses"))]
BatchesServiceDep = Annotated[BatchesService, Depends(_state("batches"))]
# control
AccountingDep = Annotated[Accounting, Depends(_state("accounting"))]
PoolControlDep = Annotated[PoolControl, Depends(_state("pool_control"))]
CanariesDep = Annotated[Canaries, Depends(_state("canaries"))]
# accounts and what they keep
TenantStoreDep = Annotated[TenantStore, Depends(_state("store"))]
SessionSignerDep = Annotated[SessionSigner, Depends(_state("sessions"))]
AccountDataDep = Annotated[AccountData, Depends(_state("account_data"))]
InstructionsDep = Annotated[Instructions, Depends(_state("instructions"))]
MemoryDep = Annotated[MemoryService, Depends(_state("memory"))]
ShareServiceDep = Annotated[ShareService, Depends(_state("shares"))]
ConversationStoreDep = Annotated[ConversationStore, Depends(_state("conversations"))]
ConversationSearchDep = Annotated[ConversationSearch, Depends(_state("conversation_search"))]
LedgerDep = Annotated[LedgerStore, Depends(_state("ledger"))]
SafetyAuditDep = Annotated[SafetyAuditStore, Depends(_state("safety_audit"))]
FeedbackServiceDep = Annotated[FeedbackService, Depends(_state("feedback_service"))]
# the other endpoints' services
EmbeddingServiceDep = Annotated[EmbeddingService, Depends(_state("embeddings"))]
RerankServiceDep = Annotated[RerankService, Depends(_state("rerank"))]
ModerationServiceDep = Annotated[ModerationService, Depends(_state("moderation"))]
FilesServiceDep = Annotated[FilesService, Depends(_state("files_service"))]
VectorStoresServiceDep = Annotated[VectorStoresService, Depends(_state("vector_stores"))]
VectorStoreSearchDep = Annotated[VectorStoreSearch, Depends(_state("vector_search"))]
RetrievalDep = Annotated[Retrieval, Depends(_state("retrieval"))]
