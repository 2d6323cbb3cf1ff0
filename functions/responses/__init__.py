"""The Responses API (`/v1/responses`) over the chat pipeline: requests translated to chat, answers shaped as
Response objects and typed stream events, stored responses kept with their conversation turns."""
