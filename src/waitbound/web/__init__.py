"""``waitbound serve``: one HTTP service for the push path (webhooks in, SSE out) and
the inbox's pages for people, that also drives the store's operations as
``waitbound worker`` does. Starlette on uvicorn; a surface over the public API. See
``docs/serve.md`` and ``docs/inbox.md``.
"""
