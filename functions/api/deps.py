"""The gateway's services as FastAPI dependencies: a handler declares what it uses with an `Annotated` alias, and
nothing fetches `app.state` by hand (the services are built once, in `create_app`'s lifespan)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from functions.chat.pipeline import ChatPipeline


def _chat_pipeline(request: Request) -> ChatPipeline:
    return request.app.state.chat_pipeline


ChatPipelineDep = Annotated[ChatPipeline, Depends(_chat_pipeline)]
