"""One router per endpoint family; routers validate, call a service, pick the response type."""
